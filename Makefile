# Two commands for a fresh machine: `make demo` and `make test`.
# Both bootstrap .venv on first use and are no-ops for the install step after.
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test pytest lit bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	# torch first and by exact version: this machine has its CPU wheel; letting pip
	# resolve torch through another package would pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m etc.tools.demo

test: $(STAMP)
	$(PY) -m pytest test/python
	$(VENV)/bin/lit -sv test/lit

pytest: $(STAMP)
	$(PY) -m pytest test/python

lit: $(STAMP)
	$(VENV)/bin/lit -sv test/lit

bench: $(STAMP)
	$(PY) -m etc.tools.bench

clean:
	rm -rf $(VENV)
