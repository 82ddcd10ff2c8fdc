# nanodata: `make demo` runs the main job, `make test` the whole suite, `make bench` the benchmarks.
# Every target sets up .venv from requirements.lock first (exact versions), so a fresh clone needs nothing else.
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed-stamp
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)

.PHONY: setup test demo bench lock clean

setup: $(STAMP)

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check "pip==26.3"
	$(PY) -m pip install --quiet -c requirements.lock -e ".[airflow,dev]"
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q tests

demo: $(STAMP)
	$(PY) scripts/demo.py

bench: $(STAMP)
	$(PY) benchmarks/run_all.py

lock: $(STAMP)
	{ sed -n '1,2p' requirements.lock; $(PY) -m pip freeze --exclude-editable | grep -v '^nanodata' | sed -E 's/^(torch==[^+]*)\+.*/\1/'; } > requirements.lock.tmp
	mv requirements.lock.tmp requirements.lock

clean:
	rm -rf $(VENV) demo_out .pytest_cache
