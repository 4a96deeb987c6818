# Two commands on a fresh machine with Python 3.11: `make run` (nearDup on sample_corpus) and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin

.PHONY: run test bench install clean

$(BIN)/neardup: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[test,dask,formats]'
	touch $@

install: $(BIN)/neardup

run: $(BIN)/neardup
	$(BIN)/neardup run sample_corpus/

test: $(BIN)/neardup
	$(BIN)/python -m pytest tests/

bench: $(BIN)/neardup
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python bench/run.py
	$(BIN)/python bench/scaling.py

clean:
	rm -rf $(VENV) bench/out
