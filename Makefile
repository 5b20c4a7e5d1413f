# Everything a fresh machine needs comes from here: `make run` and `make test` create the
# virtualenv from pinned requirements on first use. `make run` installs only what the server and
# the CLI need (requirements-run.txt); `make setup` (and every test target) adds the test toolchain.
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
PY := $(BIN)/python
# One stamp per level: after `make test`, `make run` finds its level installed and starts at once.
RUN_STAMP := $(VENV)/.run-stamp
STAMP := $(VENV)/.installed-stamp
REGION ?= us-east-1
export SAM_CLI_TELEMETRY := 0
export AWS_DEFAULT_REGION ?= $(REGION)

.PHONY: setup run test lint typecheck validate scan build runtime pytest contract routes bench clean tools install-cli dist console-screenshot cost

setup: $(STAMP) tools

# The server (this project, editable), the local runtime (./local, editable: it runs this
# checkout's template and functions) and the `joinplane` command (./cli), which the README's
# walk-through runs from .venv/bin, with their pinned dependencies and nothing else.
$(RUN_STAMP): requirements-run.txt pyproject.toml local/pyproject.toml cli/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-run.txt
	$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . -e ./local -e ./cli
	touch $(RUN_STAMP)

$(STAMP): $(RUN_STAMP) requirements-dev.txt
	$(BIN)/pip install -q --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

# axe-core, the accessibility engine tests/console runs in the page: pinned by its package-lock.json,
# taken from npm's cache when it is there.
AXE_STAMP := tests/console/node_modules/.installed-stamp

# Debian tools the tests drive as a real client would (openssl makes CSRs and verifies chains;
# chromium shows the operator console to tests/console, through playwright's Python API, which
# never downloads a browser of its own; swtpm, swtpm_setup and tpm2-tools are the TPM stack the TPM
# tests manufacture and drive a software TPM with).
tools: $(AXE_STAMP)
	@command -v openssl >/dev/null || { apt-get update -qq && apt-get install -y -qq openssl; }
	@command -v swtpm >/dev/null || { apt-get update -qq && apt-get install -y -qq swtpm; }
	@command -v swtpm_setup >/dev/null || { apt-get update -qq && apt-get install -y -qq swtpm-tools; }
	@command -v tpm2_createek >/dev/null || { apt-get update -qq && apt-get install -y -qq tpm2-tools; }
	@test -x /usr/bin/chromium || { apt-get update -qq && apt-get install -y -qq chromium; }

$(AXE_STAMP): tests/console/package-lock.json
	@command -v npm >/dev/null || { apt-get update -qq && apt-get install -y -qq npm; }
	npm ci --prefix tests/console --prefer-offline --ignore-scripts --no-audit --no-fund --loglevel=error
	touch $@

# docs/console-queue.png, the README's picture of the approval queue, taken by the queue's browser test.
console-screenshot: setup
	JOINPLANE_CONSOLE_SCREENSHOT=$(abspath docs/console-queue.png) $(BIN)/pytest tests/console/test_console_browser.py -k two_pools

run: $(RUN_STAMP)
	@echo "The joinplane command is $(abspath $(BIN))/joinplane: put it on PATH with"
	@echo "  export PATH=\"$(abspath $(BIN)):\$$PATH\"   (or install it alone: make install-cli)"
	$(PY) -m joinplane_local $(ARGS)

# The `joinplane` command alone (cli/pyproject.toml: cryptography, no server code), in a virtualenv of
# its own under CLI_PREFIX, linked into CLI_PREFIX/bin (on PATH in most shells for ~/.local/bin).
CLI_PREFIX ?= $(HOME)/.local
CLI_VENV := $(CLI_PREFIX)/share/joinplane-cli
install-cli:
	$(PYTHON) -m venv $(CLI_VENV)
	$(CLI_VENV)/bin/pip install -q --disable-pip-version-check --upgrade ./cli
	mkdir -p $(CLI_PREFIX)/bin && ln -sf $(CLI_VENV)/bin/joinplane $(CLI_PREFIX)/bin/joinplane
	@$(CLI_PREFIX)/bin/joinplane --version
	@echo "Installed $(CLI_PREFIX)/bin/joinplane (is $(CLI_PREFIX)/bin on your PATH?)"

# The CLI's wheel, for machines: pip install cli/dist/joinplane_cli-*.whl (pulls in cryptography).
dist: setup
	rm -rf cli/dist
	$(BIN)/pip wheel -q --disable-pip-version-check --no-deps --no-build-isolation -w cli/dist ./cli
	@ls cli/dist/*.whl

# What each flow of a machine's life costs at AWS list prices, measured on the local runtime
# (docs/cost.md); ends with one JSON line of $ per million flows per signing mode.
cost: $(RUN_STAMP)
	$(PY) -m joinplane_local.cost $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy layers/domain/joinplane local/joinplane_local cli/joinplane_cli functions

validate: setup
	$(BIN)/sam validate --lint --template template.yaml --region $(REGION)

# The template's security scan: checkov, pinned with all it loads in its own virtualenv (its pins
# clash with the dev tools'). Any failed check fails; each waiver is a `Metadata: checkov: skip`
# beside its resource in template.yaml, with the reason. A template checkov cannot parse fails
# too (CKV_PARSE_ERROR_FAIL), rather than passing with nothing scanned. Offline: no policy
# download, no guideline mapping.
SCAN_VENV := $(VENV)/scan
SCAN_STAMP := $(SCAN_VENV)/.installed-stamp

$(SCAN_STAMP): requirements-scan.txt
	$(PYTHON) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/pip install -q --disable-pip-version-check -r requirements-scan.txt
	touch $@

scan: $(SCAN_STAMP)
	CKV_PARSE_ERROR_FAIL=true BC_SKIP_MAPPING=TRUE $(SCAN_VENV)/bin/checkov --file template.yaml \
	  --framework cloudformation --compact --quiet --skip-download

# Lambda's /opt and /var/task are read-only: bytecode not shipped is recompiled on every cold start.
# unchecked-hash because zip packaging keeps mtimes only to 2 s, which would invalidate timestamp pycs.
build: setup
	$(BIN)/sam build --template template.yaml --region $(REGION) --cached
	$(PY) -m compileall -q --invalidation-mode unchecked-hash .aws-sam/build

# The packaged-artifact tests import handlers from .aws-sam/build with only what the Lambda
# python3.11 runtime provides (boto3 and its dependencies) beside the layer.
runtime: .lambda-runtime/.stamp
.lambda-runtime/.stamp: requirements-run.txt
	rm -rf .lambda-runtime
	$(BIN)/pip install -q --disable-pip-version-check --target .lambda-runtime \
	  $$(grep -E '^(boto3|botocore|s3transfer|jmespath|python-dateutil|six|urllib3)==' requirements-run.txt)
	touch $@

# One pytest-xdist worker per core, each given whole files (module-scoped runtimes start once per
# file, and a file's tests keep their order): on 2 cores pytest takes ~0.6 of the time it takes in one
# process (1672 tests, back to back on a loaded machine: 565 s -> 340 s). PARALLEL= runs it in one.
# --no-loadscope-reorder: xdist would otherwise queue files by test count, largest first, and start
# the one 200 s agent test (3 tests in its file) minutes in; tests/conftest.py puts the longest first.
# One worker more than the cores: the agent's renewal test mostly sleeps (200 s of a certificate's
# lifetime, on the real clock the agent reads), and the extra worker keeps both cores busy meanwhile.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
PARALLEL ?= -n $(WORKERS) --dist loadfile --no-loadscope-reorder

pytest: setup
	$(BIN)/pytest $(PARALLEL)

# Every call a function makes in the tests is checked against its IAM statements (tests/conftest.py);
# the run also records them, and lists in .iam-record/unused-grants.txt the grants no test used.
# The static checks (lint, typecheck, validate, scan: about 40 s) run beside pytest, not before it:
# pytest's workers leave the cores idle while tests wait on subprocesses and sleeps. Their output is
# shown once both are done, and either failing fails the target.
test: setup build runtime $(SCAN_STAMP)
	rm -rf .iam-record
	@$(MAKE) --no-print-directory lint typecheck validate scan > .checks.log 2>&1 & checks=$$!; \
	JOINPLANE_IAM_RECORD=.iam-record JOINPLANE_REQUIRE_BUILD=1 $(BIN)/pytest $(PARALLEL); tests=$$?; \
	wait $$checks; checked=$$?; \
	echo "--- static checks (make lint typecheck validate scan):"; cat .checks.log; \
	if [ $$checked -ne 0 ]; then echo "make test: the static checks failed (above)"; fi; \
	[ $$tests -eq 0 ] && [ $$checked -eq 0 ]

# shared/openapi.json against the local runtime (schemathesis, every check on every operation in
# every phase). `make test` gives it 30 s to fuzz in; `make contract` 120 s, and
# JOINPLANE_SCHEMATHESIS_SECONDS=600 JOINPLANE_SCHEMATHESIS_EXAMPLES=200 make contract digs deeper.
JOINPLANE_SCHEMATHESIS_SECONDS ?= 120
contract: setup tools
	JOINPLANE_SCHEMATHESIS_SECONDS=$(JOINPLANE_SCHEMATHESIS_SECONDS) $(BIN)/pytest tests/contract

# After adding or changing a row of layers/domain/joinplane/routes.py (or a request model or view):
# template.yaml gets the HttpApi event of every route it lacks (it names, and leaves, any event the
# table lacks), and shared/openapi.json is written again.
routes: $(RUN_STAMP)
	$(PY) -m joinplane.contract.template template.yaml
	$(PY) -m joinplane.contract > shared/openapi.json.new && mv shared/openapi.json.new shared/openapi.json

bench: setup build runtime
	$(PY) -m tests.bench
	$(PY) -m tests.bench_events
	$(PY) -m tests.bench_queue
	$(PY) -m tests.bench_queue_across
	$(PY) -m tests.bench_fleet_boot
	$(PY) -m tests.bench_overload
	$(PY) -m tests.bench_junk
	$(PY) -m tests.bench_cli_startup

clean:
	rm -rf $(VENV) .aws-sam .lambda-runtime
