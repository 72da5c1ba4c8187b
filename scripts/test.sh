#!/usr/bin/env bash
# The test command: sets up whatever is missing (without the main job), then lints and runs
# the whole test suite against the local cluster. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --no-demo
. scripts/cluster.sh
EMEM_PGPORT=$(cluster_port "$(cluster_pgdata)")  # the port set-up wrote into the cluster's configuration
export EMEM_PGPORT EMEM_REQUIRE_SERVER=1  # the cluster runs: a test that cannot reach it fails
python=.venv/bin/python  # the project's virtual environment (made by setup.sh)
"$python" -m ruff check .
"$python" -m ruff format --check .
# mypy --strict ([tool.mypy] in pyproject.toml), cached in .mypy_cache. bench and evaluation are
# scripts whose modules import one another by bare name, and both have a corpus.py and a run.py,
# so each is checked in a run of its own.
"$python" -m mypy emem_client plpython/emem_db
"$python" -m mypy bench
"$python" -m mypy evaluation
# The tests import their helpers by bare name (pytest puts each test's folder and tests/ on the
# path); tests/client has a conftest.py of its own, so it is checked apart from the rest.
MYPYPATH=tests:plpython:evaluation "$python" -m mypy --explicit-package-bases tests --exclude tests/client
MYPYPATH=tests/client:tests:plpython:evaluation "$python" -m mypy --explicit-package-bases tests/client
"$python" -m pytest "$@"
