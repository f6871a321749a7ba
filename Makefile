# envad: two commands do all set-up on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: install system-deps test test-serial test-slow lint demo protos bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[server,train,dev,ray]'
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

## Debian packages the tests use: headless Chromium renders the review page of
## `envad report` (tests/client/test_report_page.py). A no-op when chromium is there; as root
## it installs it with apt-get, otherwise it says what to install.
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	      --no-install-recommends chromium fonts-dejavu-core >/dev/null; \
	  else echo "make system-deps: install the Debian package chromium (as root)" >&2; fi; }

## run the default test suite (CPU-only, offline; slow and GPU checks are skipped) with one
## pytest-xdist worker more than there are cores (much of the suite waits on servers and
## the processes it starts, so a worker per core leaves cores idle), each with one-thread
## OpenMP/BLAS pools (tests/conftest.py); each test file runs on one worker, so a module's
## costly fixtures are built once. pytest's exit code 5, "no tests collected", fails here.
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: $(STAMP) system-deps
	@$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25; code=$$?; \
	if [ $$code -eq 5 ]; then echo "make test: pytest collected no tests" >&2; exit 1; fi; \
	exit $$code

## the same suite in one process (easier to debug: one log, pdb works)
test-serial: $(STAMP) system-deps
	@$(PY) -m pytest; code=$$?; \
	if [ $$code -eq 5 ]; then echo "make test-serial: pytest collected no tests" >&2; exit 1; fi; \
	exit $$code

## lint and type-check the whole tree (ruff, then mypy through scripts/typecheck.py;
## the generated gRPC stubs are excluded); both run, and either failing fails the target
lint: $(STAMP)
	@$(VENV)/bin/ruff check .; ruff=$$?; \
	$(PY) scripts/typecheck.py; mypy=$$?; \
	[ $$ruff -eq 0 ] && [ $$mypy -eq 0 ]

## run the slow checks too
test-slow: $(STAMP)
	$(PY) -m pytest -m slow

## the main job: PhotoDigits -> train -> export -> serve -> backfill -> fit -> score -> report
demo: $(STAMP)
	$(PY) -m envad.client.demo --workdir var/demo

## regenerate the gRPC stubs from proto/envad/v1/envad.proto
protos: $(STAMP)
	$(PY) scripts/gen_protos.py

## speed benchmarks: print every ratio against its reference (measured in the same run),
## keep the JSON lines under docs/results/bench and re-render docs/benchmarks.md from them
bench: $(STAMP)
	$(PY) -m benchmarks.run_all

clean:
	rm -rf $(VENV) var build *.egg-info
