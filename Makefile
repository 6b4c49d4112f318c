# Everything a fresh machine needs: `make demo` and `make test` create .venv when missing.
# PYTHON is any CPython 3.11+ with its venv module (Debian: `apt-get install python3-venv`).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.aotui-installed
# mypy cannot follow setuptools' editable import hook, so it reads the three rooms through a tree
# of links named as they install (aotui.protocol → protocol/ …); see [tool.mypy] mypy_path.
TYPECHECK := $(VENV)/typecheck/aotui

.PHONY: demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	mkdir -p $(TYPECHECK)
	for room in protocol sandbox supervisor; do ln -sfn "$(CURDIR)/$$room" $(TYPECHECK)/$$room; done
	ln -sfn "$(CURDIR)/supervisor/_aotui/__init__.py" $(TYPECHECK)/__init__.py
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/aotui demo

lint: $(STAMP)
	ln -sfn "$(CURDIR)/apps" $(TYPECHECK)/apps  # the bundled apps are type-checked as aotui.apps
	$(BIN)/ruff check .
	$(BIN)/mypy

# The TodoMVC apps tests/test_web_generic.py runs as third-party pages, fetched once from npm
# (no network while the tests run); without npm those tests fetch nothing and are skipped.
TODOMVC := $(VENV)/todomvc-0.1.1.tgz
$(TODOMVC): | $(STAMP)
	if command -v npm >/dev/null; then cd $(VENV) && npm pack todomvc@0.1.1 --silent >/dev/null; \
	else echo "npm not found: the TodoMVC tests will be skipped (apt-get install npm)"; fi

# Two test processes; a file's tests stay on one of them (its module fixtures run once).
test: lint $(TODOMVC)
	$(BIN)/python -m pytest -n 2 --dist loadfile

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
