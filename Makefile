# emem: a PGXS extension (SQL + PL/Python + pgvector). The version lives in emem.control only.
EXTENSION = emem
EXTVERSION := $(shell sed -n "s/^default_version[[:space:]]*=[[:space:]]*'\([^']*\)'.*/\1/p" $(EXTENSION).control)

# Sources: the numbered files of sql/ (00-19 the schema: types and tables; 20-99 the code:
# functions, views, policies, grants) and the steps of the upgrades into this version
# (sql/upgrade/). Everything PostgreSQL loads is built into build/ (ignored by git); releases
# already shipped are kept as shipped in sql/releases/ (their manifest: sql/releases/MANIFEST).
EMEM_BUILD := build
SQL_SOURCES := $(sort $(wildcard sql/[0-9][0-9]_*.sql))
CODE_SOURCES := $(sort $(wildcard sql/[2-9][0-9]_*.sql))
UPGRADE_STEPS := $(wildcard sql/upgrade/$(EXTENSION)--*--$(EXTVERSION).sql)
EMEM_INSTALL_SCRIPT := $(EMEM_BUILD)/$(EXTENSION)--$(EXTVERSION).sql
EMEM_UPGRADE_SCRIPTS := $(UPGRADE_STEPS:sql/upgrade/%=$(EMEM_BUILD)/%)
DATA_built := $(EMEM_INSTALL_SCRIPT) $(EMEM_UPGRADE_SCRIPTS)
DATA = $(wildcard sql/releases/$(EXTENSION)--*.sql)
EXTRA_CLEAN = $(EMEM_BUILD) plpython/emem_db/_version.py plpython/emem_db/lexicon.json

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# plpython3u runs the system Python, so the in-database package goes where it looks, under a name
# of this release's own (plpython/emem_db installed as emem_db_0_3_0; its imports are relative), so
# that a server holding databases of two releases serves each its own. Before 0.3.0 it was
# installed as emem_db.
SYSTEM_PYTHON ?= /usr/bin/python3
PLPYTHON_SITE ?= $(shell $(SYSTEM_PYTHON) -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
EMEM_MODULE := emem_db_$(subst .,_,$(EXTVERSION))
EMEM_MODULE_DIR = $(PLPYTHON_SITE)/$(EMEM_MODULE)
WORDNET_DIR ?= /usr/share/wordnet
LEGACY_RELEASE_COMMIT ?= $(shell awk '$$1 == "0.2.1" && $$3 == "modules" {print $$2}' sql/releases/MANIFEST)

all: plpython/emem_db/_version.py plpython/emem_db/lexicon.json $(DATA_built)

$(EMEM_BUILD):
	mkdir -p $@

# @EXTVERSION@ and @MODULE@ (this release's package) are filled in; every script is the sources in order.
SUBSTITUTE = sed -e 's/@EXTVERSION@/$(EXTVERSION)/g' -e 's/@MODULE@/$(EMEM_MODULE)/g'

$(EMEM_INSTALL_SCRIPT): $(SQL_SOURCES) $(EXTENSION).control Makefile | $(EMEM_BUILD)
	$(SUBSTITUTE) $(SQL_SOURCES) > $@

# An upgrade: the prologue drops the old code (found in the catalog), the step changes the tables,
# the code is created exactly as a fresh install creates it, and the step's .after.sql (if any)
# fills what needs the new code.
$(EMEM_BUILD)/$(EXTENSION)--%--$(EXTVERSION).sql: sql/upgrade/prologue.sql sql/upgrade/$(EXTENSION)--%--$(EXTVERSION).sql $(CODE_SOURCES) $(EXTENSION).control Makefile | $(EMEM_BUILD)
	$(SUBSTITUTE) sql/upgrade/prologue.sql sql/upgrade/$(EXTENSION)--$*--$(EXTVERSION).sql $(CODE_SOURCES) \
		$(wildcard sql/upgrade/$(EXTENSION)--$*--$(EXTVERSION).after.sql) > $@

plpython/emem_db/_version.py: $(EXTENSION).control
	printf '"""Written by the Makefile from emem.control: the version these modules belong to."""\n\nVERSION = "%s"\n' '$(EXTVERSION)' > $@

plpython/emem_db/lexicon.json: plpython/build_lexicon.py plpython/wordnet/lexnames
	$(SYSTEM_PYTHON) plpython/build_lexicon.py --wordnet $(WORDNET_DIR) --lexnames plpython/wordnet/lexnames --out $@

install: install-plpython

# The package with its subpackages; _version.py and lexicon.json are built, so named here.
PLPYTHON_FILES = $(sort $(patsubst plpython/emem_db/%,%,$(shell find plpython/emem_db -name '*.py' -not -path '*/__pycache__/*')) \
                  _version.py lexicon.json)

install-plpython: all
	rm -rf '$(DESTDIR)$(EMEM_MODULE_DIR)'
	for f in $(PLPYTHON_FILES); do install -D -m 644 "plpython/emem_db/$$f" "$(DESTDIR)$(EMEM_MODULE_DIR)/$$f" || exit 1; done

uninstall: uninstall-plpython

uninstall-plpython:
	rm -rf '$(DESTDIR)$(EMEM_MODULE_DIR)'

# The in-database modules of release 0.2.1, where it installed them, from git history (the commit
# in sql/releases/MANIFEST), with this build's lexicon: what databases still at 0.2.1 (or 0.2.0)
# run until they are updated, and what the upgrade tests write their data with.
install-legacy-modules: plpython/emem_db/lexicon.json
	@test -n '$(LEGACY_RELEASE_COMMIT)' || { echo "sql/releases/MANIFEST names no 0.2.1 modules commit" >&2; exit 1; }
	@git cat-file -e '$(LEGACY_RELEASE_COMMIT)^{commit}' 2>/dev/null || { echo "no git history with commit $(LEGACY_RELEASE_COMMIT) (0.2.1): clone the repository with its history" >&2; exit 1; }
	rm -rf '$(EMEM_BUILD)/legacy' && mkdir -p '$(EMEM_BUILD)/legacy'
	git archive '$(LEGACY_RELEASE_COMMIT)' plpython/emem_db | tar -x -C '$(EMEM_BUILD)/legacy'
	printf 'VERSION = "0.2.1"\n' > '$(EMEM_BUILD)/legacy/plpython/emem_db/_version.py'
	cp plpython/emem_db/lexicon.json '$(EMEM_BUILD)/legacy/plpython/emem_db/lexicon.json'
	rm -rf '$(DESTDIR)$(PLPYTHON_SITE)/emem_db'
	cd '$(EMEM_BUILD)/legacy/plpython' && find emem_db -name '*.py' -o -name '*.json' | \
		while read -r f; do install -D -m 644 "$$f" "$(DESTDIR)$(PLPYTHON_SITE)/$$f" || exit 1; done

# When a release ships: its upgrade scripts are kept as shipped in sql/releases/ with their hashes
# and the commit in the manifest (tests/test_upgrade.py checks both); any later change of SQL
# needs a new version.
freeze: all
	@! grep -q '^$(EXTVERSION) ' sql/releases/MANIFEST || { echo "$(EXTVERSION) is frozen already" >&2; exit 1; }
	for f in $(EMEM_UPGRADE_SCRIPTS); do cp $$f sql/releases/ && \
		printf '%s %s script %s %s\n' '$(EXTVERSION)' "$$(git rev-parse HEAD)" "$$(basename $$f)" \
			"$$(sha256sum $$f | cut -d' ' -f1)" >> sql/releases/MANIFEST; done
	printf '%s %s install %s %s\n' '$(EXTVERSION)' "$$(git rev-parse HEAD)" "$$(basename $(EMEM_INSTALL_SCRIPT))" \
		"$$(sha256sum $(EMEM_INSTALL_SCRIPT) | cut -d' ' -f1)" >> sql/releases/MANIFEST

.PHONY: install-plpython uninstall-plpython install-legacy-modules test bench bench-embed eval freeze

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
