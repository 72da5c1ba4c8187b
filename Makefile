# emem: a PGXS extension (SQL + PL/Python + pgvector). The version lives in emem.control only.
EXTENSION = emem
EXTVERSION := $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" $(EXTENSION).control)

# The install script is built from the numbered sources in sql/; upgrade scripts are picked up as they are.
SQL_SOURCES := $(sort $(wildcard sql/[0-9][0-9]_*.sql))
# The code (functions, triggers, views, policies, grants): what an upgrade into this version
# creates again after its own steps (sql/upgrade/), exactly as a fresh install does.
CODE_SOURCES := $(sort $(wildcard sql/[2-9][0-9]_*.sql))
UPGRADE_STEPS := $(wildcard sql/upgrade/$(EXTENSION)--*--$(EXTVERSION).sql)
DATA_built = sql/$(EXTENSION)--$(EXTVERSION).sql
DATA = $(wildcard sql/$(EXTENSION)--*--*.sql)
EXTRA_CLEAN = plpython/emem_db/_version.py plpython/emem_db/lexicon.json

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# plpython3u runs the system Python, so the in-database modules go where it looks.
SYSTEM_PYTHON ?= /usr/bin/python3
PLPYTHON_SITE ?= $(shell $(SYSTEM_PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
WORDNET_DIR ?= /usr/share/wordnet

all: plpython/emem_db/_version.py plpython/emem_db/lexicon.json upgrade-script

sql/$(EXTENSION)--$(EXTVERSION).sql: $(SQL_SOURCES) $(EXTENSION).control
	sed -e 's/@EXTVERSION@/$(EXTVERSION)/g' $(SQL_SOURCES) > $@

# The upgrade scripts into this version, from their steps and the code; committed, so that they
# ship as they were tested (tests/test_upgrade.py checks they match their sources).
upgrade-script: $(UPGRADE_STEPS:sql/upgrade/%=sql/%)

sql/$(EXTENSION)--%--$(EXTVERSION).sql: sql/upgrade/$(EXTENSION)--%--$(EXTVERSION).sql $(CODE_SOURCES) $(EXTENSION).control
	sed -e 's/@EXTVERSION@/$(EXTVERSION)/g' $< $(CODE_SOURCES) > $@

plpython/emem_db/_version.py: $(EXTENSION).control
	printf '"""Written by the Makefile from emem.control: the version these modules belong to."""\n\nVERSION = "%s"\n' '$(EXTVERSION)' > $@

plpython/emem_db/lexicon.json: plpython/build_lexicon.py plpython/wordnet/lexnames
	$(SYSTEM_PYTHON) plpython/build_lexicon.py --wordnet $(WORDNET_DIR) --lexnames plpython/wordnet/lexnames --out $@

install: install-plpython

# The package with its subpackages; _version.py and lexicon.json are built, so named here.
PLPYTHON_FILES = $(sort $(patsubst plpython/%,%,$(shell find plpython/emem_db -name '*.py' -not -path '*/__pycache__/*')) \
                  emem_db/_version.py emem_db/lexicon.json)

install-plpython: all
	rm -rf '$(DESTDIR)$(PLPYTHON_SITE)/emem_db'
	for f in $(PLPYTHON_FILES); do install -D -m 644 "plpython/$$f" "$(DESTDIR)$(PLPYTHON_SITE)/$$f" || exit 1; done

uninstall: uninstall-plpython

uninstall-plpython:
	rm -rf $(DESTDIR)$(PLPYTHON_SITE)/emem_db

# When a release ships: its install script is frozen in sql/releases/ with its hash in the manifest
# (tests/test_upgrade.py checks both); the next change of SQL needs a new version.
freeze: sql/$(EXTENSION)--$(EXTVERSION).sql
	@test ! -e sql/releases/$(EXTENSION)--$(EXTVERSION).sql || { echo "$(EXTVERSION) is frozen already" >&2; exit 1; }
	cp sql/$(EXTENSION)--$(EXTVERSION).sql sql/releases/
	cd sql/releases && sha256sum $(EXTENSION)--$(EXTVERSION).sql >> SHA256SUMS

.PHONY: install-plpython uninstall-plpython test bench bench-embed eval freeze upgrade-script

# The client, tests, benchmark and evaluation run in the project's virtual environment (setup.sh);
# not PYTHON, which PGXS sets to the Python PostgreSQL was configured with.
VENV_PYTHON ?= .venv/bin/python

test:
	bash scripts/test.sh

# Recall of the pipeline profiles on a generated corpus: EVAL_ARGS=--grid tries more weightings.
eval:
	$(VENV_PYTHON) evaluation/run.py $(EVAL_ARGS)

# The benchmark (not a test): BENCH_ARGS="--records 1000000" for the 1M run.
bench:
	$(VENV_PYTHON) bench/run.py $(BENCH_ARGS)

# How fast emem embed fills a space with the embedded model: BENCH_EMBED_ARGS="--records 5000".
bench-embed:
	$(VENV_PYTHON) bench/embed_throughput.py $(BENCH_EMBED_ARGS)
