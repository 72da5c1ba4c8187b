#!/usr/bin/env bash
# The README's main job: a real find over a real corpus with the embedded model (no network).
# Run by scripts/setup.sh after the local cluster started; on its own: bash scripts/main_job.sh
#
# 1. database emem_demo with the extension (created here, as the DBA; the client never does it)
# 2. emem init: the embedded model's embedding space, lanes and an agent profile
# 3. emem ingest: part of PostgreSQL's own HTML documentation and two small conversations
# 4. finds that show an exact name found through full text that vectors miss, a meaning match,
#    a window hit, the timeline, and the degraded answer while the embedding gateway is down
# Idempotent: a second run finds everything stored and embeds nothing again.
set -euo pipefail
cd "$(dirname "$0")/.."

. scripts/cluster.sh  # where set-up's local cluster is
export PGHOST=${EMEM_PGHOST:-127.0.0.1} PGPORT=${EMEM_PGPORT:-$(cluster_port "$(cluster_pgdata)")} PGUSER=${EMEM_PGUSER:-postgres}
database=${EMEM_DEMO_DB:-emem_demo}
export EMEM_DSN="host=$PGHOST port=$PGPORT user=$PGUSER dbname=$database"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1

say() { printf '\n== %s\n' "$*"; }
python=.venv/bin/python  # the project's virtual environment (scripts/setup.sh makes it)
emem() { "$python" -m emem_client.cli "$@"; }  # the `emem` command, whatever is on PATH
started=$SECONDS

say "database $database with the emem extension"
if [ -z "$(psql -d postgres -tAc "select 1 from pg_database where datname = '$database'")" ]; then
  createdb "$database"
fi
psql -q -d "$database" -c "set client_min_messages = warning" -c "create extension if not exists emem cascade"

# The documentation of the server's own major version (postgresql-doc-<major>, installed by setup.sh).
pg_major=$(psql -d "$database" -tAc "select current_setting('server_version_num')::int / 10000")
docs=/usr/share/doc/postgresql-doc-$pg_major/html
[ -d "$docs" ] || { echo "no PostgreSQL $pg_major documentation in $docs: apt-get install postgresql-doc-$pg_major" >&2; exit 1; }

say "emem init: the embedded model's space, lanes pg-docs and team, agent profile demo-agent"
emem init --lane pg-docs --lane team --profile demo-agent=pg-docs,team

say "emem ingest: the server configuration chapter and four related pages of the PostgreSQL $pg_major documentation"
emem ingest files --lane pg-docs --tag "postgresql docs" "$docs"/runtime-config*.html \
  "$docs"/hot-standby.html "$docs"/warm-standby.html "$docs"/wal-configuration.html "$docs"/routine-vacuuming.html

say "emem ingest: two team conversations (examples/conversations.json)"
emem ingest conversations --lane team examples/conversations.json

say "emem find: the README's question"
emem find "How many WAL sender processes may run at once?" --page-size 8

"$python" scripts/main_job.py

say "the timeline: the conversation turns of 4 to 6 March 2024 tagged ops"
emem timeline --from 2024-03-04 --to 2024-03-07 --kind conversation --tag ops --page-size 5

say "the embedding gateway is down (an OpenAI-compatible endpoint at 127.0.0.1:9, where nothing listens)"
emem --gateway openai --openai-base-url http://127.0.0.1:9 health || [ $? = 3 ]  # 3: degraded, as it should be here
echo
emem --gateway openai --openai-base-url http://127.0.0.1:9 find "hot_standby_feedback OPS-1432" --page-size 10

say "main job done in $((SECONDS - started)) s. Try, in any shell: emem find 'your question'"
