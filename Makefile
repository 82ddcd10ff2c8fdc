# nanodata: `make demo` runs the main job, `make test` the whole suite, `make bench` the benchmarks.
# Every target sets up .venv from requirements.lock first (exact versions), so a fresh clone needs nothing else.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup test faults demo bench lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "pip==26.3"
	$(PY) -m pip install --quiet -c requirements.lock -e ".[airflow,dev]"
	touch $(STAMP)

# The browser test (tests/deploy/test_browser.py) drives Debian's chromium through playwright: playwright's own
# browser download is not used. Installed with apt-get when missing (sudo unless root), as CI machines start without it;
# where that cannot work the rest of the suite still runs and the browser test says why it was skipped.
CHROMIUM := /usr/bin/chromium

$(CHROMIUM):
	@echo "installing Debian's chromium for tests/deploy/test_browser.py (apt-get install chromium)"
	@SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	{ $$SUDO apt-get update -qq && \
	  $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium; } && \
	test -x $(CHROMIUM) || echo "make: WARNING: could not install chromium at $(CHROMIUM) (no apt-get, no root or" \
	  "sudo, or a distribution whose chromium is a snap); tests/deploy/test_browser.py will be skipped (it fails" \
	  "when CI is set). Install Chromium at $(CHROMIUM) to run it." >&2

test: $(STAMP) $(CHROMIUM)
	$(PY) -m pytest -q tests

# The shutdown fault suite at full count: 32 runs per loader case (not closed, closed, context manager) over the
# kill points (first read, mid-iteration, resume, before exit); prints runs, hangs, aborts and the worst exit time.
# make test runs one per case and kill point (tests/loader/test_gcs_loader_shutdown.py). FAULT_RUNS, FAULT_SEED.
FAULT_RUNS ?= 32
FAULT_SEED ?= 0
faults: $(STAMP)
	$(PY) tests/loader/gcs_exit.py $(FAULT_RUNS) $(FAULT_SEED)

demo: $(STAMP)
	$(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lock: $(STAMP)
	{ sed -n '1,2p' requirements.lock; $(PY) -m pip freeze --exclude-editable | grep -v '^nanodata' | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock

clean:
	rm -rf $(VENV) demo_out .pytest_cache
