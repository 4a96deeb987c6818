# Two commands on a fresh machine with Python >= 3.11 and its venv module: `make run` (nearDup on sample_corpus)
# and `make test`; `make lint` runs ruff and mypy. Another interpreter: `make PYTHON=python3.11 run`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install --quiet --disable-pip-version-check

# Stamps in the venv record what is installed, so each target installs only what it needs and `make run` then
# `make test` installs only the test extras. The venv is named after the interpreter that made it: a PYTHON given
# on the command line that did not make it rebuilds it; without one, the existing venv is used whatever made it.
ifeq ($(origin PYTHON),command line)
MADE_WITH := $(VENV)/.made-with-$(notdir $(PYTHON))
else
MADE_WITH := $(firstword $(wildcard $(VENV)/.made-with-*) $(VENV)/.made-with-$(notdir $(PYTHON)))
endif

.PHONY: run test lint bench bench-joins bench-datatrove install man clean

$(MADE_WITH):
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11) and "nearDup needs Python >= 3.11: " \
	  "pick one with make PYTHON=python3.11 ...")'
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	touch $@

$(VENV)/.base: $(MADE_WITH) pyproject.toml Makefile
	$(PIP) -e .
	touch $@

$(VENV)/.test: $(VENV)/.base
	$(PIP) -e '.[test,dask,formats,report,parquet]'
	touch $@

# mypy checks nearDup against the types of the packages it imports: the dask and report extras too.
$(VENV)/.lint: $(VENV)/.base
	$(PIP) -e '.[lint,dask,report]'
	touch $@

$(VENV)/.bench: $(VENV)/.base
	$(PIP) -e '.[bench]'
	touch $@

install: $(VENV)/.test

run: $(VENV)/.base
	$(BIN)/neardup run sample_corpus/

test: $(VENV)/.test
	$(BIN)/python -m pytest tests/

lint: $(VENV)/.lint
	$(BIN)/ruff check nearDup tests bench
	$(BIN)/mypy nearDup

man: $(VENV)/.base
	$(BIN)/neardup help --man > neardup.1
	@echo "read it with: man ./neardup.1"

bench: $(VENV)/.bench
	$(BIN)/python bench/run.py
	$(BIN)/python bench/scaling.py

# LSH against exact joins (bench/joins.py; its section of bench/RESULTS.md), one corpus at a time: ~10 minutes each
bench-joins: $(VENV)/.bench
	$(BIN)/python bench/joins.py --corpora edited --write
	$(BIN)/python bench/joins.py --corpora imdb --write

# nearDup against datatrove's MinHash deduplication on the edited corpus as JSONL (bench/vs_datatrove.py; its section
# of bench/RESULTS.md): datatrove goes into its own venv, bench/out/venv-datatrove, never into nearDup's. ~15 minutes
# on a loaded machine, then one run of datatrove as shipped (spaCy's tokenizer: ~10 CPU minutes)
bench-datatrove: $(VENV)/.bench
	$(BIN)/python bench/vs_datatrove.py
	$(BIN)/python bench/vs_datatrove.py --thresholds 0.8 --reps 1 --datatrove-own 0.8 --write

clean:
	rm -rf $(VENV) bench/out neardup.1
