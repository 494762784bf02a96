# The two commands of the README: `make demo` (main job, embedded defaults) and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export PGMEM_HOME ?= $(CURDIR)/.pgmem

.PHONY: setup demo test test-long lint clean stop

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml setup.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[local,e5,embedded,openai,eval,langgraph,mcp,dates,dev]'
	touch $@

demo: setup
	$(BIN)/pgmem db start
	$(BIN)/pgmem migrate
	$(BIN)/pgmem demo

test: setup
	$(BIN)/python -m pytest -q -n 2
	$(BIN)/ruff check pgmem tests migrations examples
	$(BIN)/mypy

# The tests marked long (several seconds each): CI runs them after `make test`.
test-long: setup
	$(BIN)/python -m pytest -q -n 2 -m 'long and not slow'

stop:
	DATABASE_URL= $(BIN)/pgmem db stop  # the embedded server of PGMEM_HOME, even with DATABASE_URL set

clean: stop
	rm -rf $(VENV) .pgmem
