# Where emem's local cluster is; sourced by setup.sh, test.sh and main_job.sh (bash).
#
#   EMEM_PGDATA  its data directory (default /var/lib/postgresql/emem-<PostgreSQL major>)
#   EMEM_PGPORT  its port (default 5433; Debian's own cluster, if any, keeps 5432)
#
# Set-up records the data directory in /etc/emem/cluster and writes the port into the cluster's
# own configuration (postgresql.auto.conf), so a restart and every later command use them
# without the variables; a variable given later moves the cluster there (docs/setup.md).

# Debian 12 ships PostgreSQL 15, Debian 13 ships 17: detect, don't assume.
debian_major=$(cut -d. -f1 /etc/debian_version)
case "$debian_major" in
  12) pg_major=15 ;;
  13) pg_major=17 ;;
  *) echo "unsupported Debian release '$(cat /etc/debian_version)': emem supports Debian 12 and 13" >&2; exit 1 ;;
esac
export PG_CONFIG=/usr/lib/postgresql/$pg_major/bin/pg_config
pg_bin=/usr/lib/postgresql/$pg_major/bin
cluster_record=/etc/emem/cluster
default_port=5433
socket_dir=/var/run/postgresql

# The data directory: EMEM_PGDATA, else the one set-up recorded, else the default.
cluster_pgdata() {
  local recorded
  recorded=$(sed -n 's/^data_directory=//p' "$cluster_record" 2>/dev/null | head -n 1)
  echo "${EMEM_PGDATA:-${recorded:-/var/lib/postgresql/emem-$pg_major}}"
}

# The port the cluster's configuration gives (empty without a cluster or a port setting).
configured_port() {
  [ -f "$1/PG_VERSION" ] || return 0
  grep -qsE '^[[:space:]]*port[[:space:]]*=' "$1/postgresql.conf" "$1/postgresql.auto.conf" || return 0
  runuser -u postgres -- "$pg_bin/postgres" -D "$1" -C port 2>/dev/null
}

# The port the running cluster listens on (postmaster.pid's fourth line; empty when it is down).
running_port() {
  runuser -u postgres -- "$pg_bin/pg_ctl" -D "$1" status >/dev/null 2>&1 || return 0
  sed -n 4p "$1/postmaster.pid"
}

# The port: EMEM_PGPORT, else the cluster's own (running or configured), else the default.
cluster_port() {
  local port=${EMEM_PGPORT:-$(running_port "$1")}
  port=${port:-$(configured_port "$1")}
  echo "${port:-$default_port}"
}

# Replaces (or adds) the [emem] entry of a libpq service file, keeping every other entry.
write_service_entry() {
  local file=$1 port=$2 dbname=$3 kept=""
  if [ -f "$file" ]; then
    kept=$(awk '/^[[:space:]]*\[/ { skip = ($0 ~ /^[[:space:]]*\[emem\][[:space:]]*$/) } !skip' "$file")
  fi
  install -d "$(dirname "$file")"
  {
    if [ -n "$kept" ]; then printf '%s\n' "$kept"; fi
    printf '[emem]\n# written by emem'"'"'s scripts/setup.sh: its local cluster (docs/setup.md)\n'
    printf 'host=127.0.0.1\nport=%s\nuser=postgres\ndbname=%s\n' "$port" "$dbname"
  } > "$file.emem-new"
  chmod 644 "$file.emem-new"
  mv "$file.emem-new" "$file"
}
