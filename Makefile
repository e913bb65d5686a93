# Two commands for a fresh clone:  `make report` (analyze the bundled captures) and `make test`.
# The venv is built with the first Python >= 3.12 that .ci/find-python finds (PATH, then pyenv).
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: report test lint bench goldens corpus clean

$(STAMP): pyproject.toml
	@set -e; py=$$(sh .ci/find-python); \
	  if [ ! -x $(BIN)/python ] || ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info < (3, 12))'; then \
	    rm -rf $(VENV); echo "creating $(VENV) with $$py"; $$py -m venv $(VENV); fi
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	@touch $@

report: $(STAMP)
	$(BIN)/erascope analyze captures/

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m bench

goldens: $(STAMP)
	$(BIN)/python -m tests.goldens

corpus: $(STAMP)
	$(BIN)/python captures/record.py

clean:
	rm -rf $(VENV) .peers .pytest_cache .ruff_cache
