# `make demo` and `make test` are all a fresh clone needs: each creates .venv on first use.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench evals docs clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	# bytecode for stepdoctor's own modules, as a wheel install has it (an editable install writes it on first
	# import, unless PYTHONDONTWRITEBYTECODE is set: then every run would compile every module, ~0.15 s)
	$(BIN)/python -c "from stepdoctor.evals.bench import compile_bytecode; compile_bytecode()"
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/stepdoctor demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest

lint: $(STAMP)
	$(BIN)/ruff check .

bench: $(STAMP)
	$(BIN)/python -m stepdoctor.evals.bench.bench_ingest
	$(BIN)/python -m stepdoctor.evals.bench.bench_issues

evals: $(STAMP)
	$(BIN)/python -m stepdoctor.evals.score

docs: $(STAMP)
	$(BIN)/python -m stepdoctor.tools.gendocs
	$(BIN)/python -m stepdoctor.knowledge.render > docs/fixes.md
	$(BIN)/python -m stepdoctor.server.gendocs > docs/tools.md
	$(BIN)/python -m stepdoctor.server.gendocs --readme

clean:
	rm -rf $(VENV) build *.egg-info
