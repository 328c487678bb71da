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

.PHONY: venv plan build-matrix test test-unit index serve publish clean

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
	@# index even when some jobs failed: the landing page lists them with their reason; then exit as the build did
	status=0; $(BIN)/wheelwright build --profile $(PROFILE) --output $(OUTPUT) || status=$$?; \
	$(BIN)/wheelwright index --output $(OUTPUT) $(if $(BASE_URL),--base-url $(BASE_URL)) && exit $$status

index: $(STAMP)
	$(BIN)/wheelwright index --output $(OUTPUT) $(if $(BASE_URL),--base-url $(BASE_URL))

serve: $(STAMP)
	$(BIN)/wheelwright serve --output $(OUTPUT) --port $(PORT)

publish: $(STAMP)
	$(BIN)/wheelwright publish --output $(OUTPUT) $(PUBLISH_ARGS)

test: $(STAMP)
	$(BIN)/python -m pytest $(PYTEST_ARGS)

test-unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info
