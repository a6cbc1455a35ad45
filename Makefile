# `make run`: set up and run jobsweb (web + worker); `make test`: set up and run the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test
run: $(STAMP)
	$(BIN)/flask --app wsgi dev

test: $(STAMP)
	$(BIN)/pytest

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)
