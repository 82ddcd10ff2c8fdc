# nanodata: `make demo` runs the main job, `make test` the whole suite, `make bench` the benchmarks;
# `make test-xla` / `make bench-xla` the TPU path on XLA's CPU runtime, in .venv-xla.
# Every target sets up .venv from requirements.lock first (exact versions), so a fresh clone needs nothing else.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup test faults demo bench lock clean setup-xla test-xla bench-xla lock-xla test-cuda bench-cuda

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

# The CUDA path, on a machine with an NVIDIA GPU (torch==2.13.0 from PyPI is its CUDA build there): the loaders'
# pinned staging buffer and asynchronous copies (tests/cuda, skipped where no GPU is seen), and whether the loader
# ever holds up a real training step (benchmarks/bench_loader_cuda.py).
test-cuda: $(STAMP)
	$(PY) -m pytest -q tests/cuda

bench-cuda: $(STAMP)
	$(PY) benchmarks/bench_loader_cuda.py

# The TPU path (tests/xla): torch-xla 2.9.0, the newest release, needs torch 2.9.0, not the main lock's 2.13, so it
# gets its own venv, lock and stamp (.venv is never touched; a second run installs nothing). PJRT_DEVICE=CPU runs
# the real XLA runtime on this machine's CPU. torch 2.9.0 from PyPI is the CUDA build: ~3 GB downloaded, ~7.5 GB
# installed, ~4 min here (PyPI has no CPU-only x86_64 wheel of it; without its nvidia-* packages torch won't import).
XLA_VENV   := .venv-xla
XLA_PY     := $(XLA_VENV)/bin/python
XLA_STAMP  := $(XLA_VENV)/.installed-stamp
# Python 3.10-3.13 (torch-xla 2.9.0's wheels; the lock is made on 3.11)
XLA_PYTHON ?= python3
XLA_ENV    := PATH=$(CURDIR)/$(XLA_VENV)/bin:$$PATH PJRT_DEVICE=CPU

setup-xla: $(XLA_STAMP)

$(XLA_STAMP): pyproject.toml requirements-xla.lock
	test -x $(XLA_PY) || $(XLA_PYTHON) -m venv $(XLA_VENV)
	$(XLA_PY) -m pip install --quiet --disable-pip-version-check "pip==26.3"
	$(XLA_PY) -m pip install --quiet -c requirements-xla.lock -e ".[dev]" torch-xla
	touch $(XLA_STAMP)

test-xla: $(XLA_STAMP)
	$(XLA_ENV) $(XLA_PY) -m pytest -q tests/xla

bench-xla: $(XLA_STAMP)
	$(XLA_ENV) $(XLA_PY) benchmarks/bench_loader_xla.py

lock-xla: $(XLA_STAMP)
	{ sed -n '1,2p' requirements-xla.lock; $(XLA_PY) -m pip freeze --exclude-editable | grep -v '^nanodata'; } > requirements-xla.lock.tmp
	mv requirements-xla.lock.tmp requirements-xla.lock

lock: $(STAMP)
	{ sed -n '1,2p' requirements.lock; $(PY) -m pip freeze --exclude-editable | grep -v '^nanodata' | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock

clean:
	rm -rf $(VENV) $(XLA_VENV) demo_out .pytest_cache
