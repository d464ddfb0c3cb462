# Every target builds the virtual environment it needs first, so each works on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REQUIREMENTS := requirements.txt policy/requirements.txt requirements-dev.txt
STAMP := $(VENV)/.installed-$(shell cat $(REQUIREMENTS) | sha256sum | cut -c1-16)
STACK ?= dev
# Extra flags for `pulumi preview|up|destroy` (make up PULUMI_ARGS=--yes).
PULUMI_ARGS ?=
# make checkpoint: where the copies go, and more flags (RETRIEVE_ARGS="--all", "--epoch 4").
OUT ?=
RETRIEVE_ARGS ?=
# Extra flags for `make status` (STATUS_ARGS=--no-follow).
STATUS_ARGS ?=
# make local BACKEND=container: each replica a container of IMAGE (built by `make image`).
BACKEND ?= process
# The image `make image` builds and `make local BACKEND=container` runs: unset, STACK's own
# (the trainer image TRAINER_IMAGE, or localhost/pytorch-distributed-<stack>:local for a stack
# built from a context of its own: tools/stack_image.py). Podman's OCI runtime for the image
# targets and the container backend comes from tools/containers/defaults.env, which the scripts
# and the container backend read too; CONTAINER_RUNTIME= uses podman's default.
include tools/containers/defaults.env
IMAGE ?=
CONTAINER_RUNTIME ?= $(DEFAULT_CONTAINER_RUNTIME)
export CONTAINER_RUNTIME

SHELL_SCRIPTS := $(wildcard trainer/*.sh scripts/*.sh bench/*.sh tests/support/*.sh) .ci/run
# pytest-xdist workers for `make pytest` / `make test-fast` (auto: one per core). Only these two
# targets run in parallel; the e2e and container suites share one control plane or podman store.
PYTEST_WORKERS ?= auto
WORKFLOWS := $(wildcard .github/workflows/*.yml)

.PHONY: checkpoint help venv policy-venv test test-fast e2e e2e-tools lint format check-shell check-workflows pytest local base-image image image-test render preview up destroy status bench clean pulumi-cli

help: ## List the targets.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'

# pip's own output, not --quiet: the first install downloads torch from PyPI with its CUDA
# libraries (about 5 GB in .venv), and pip names each file with its size and shows its progress.
$(STAMP): $(REQUIREMENTS)
	@echo "make: installing requirements-dev.txt into $(VENV) (torch with its CUDA libraries from" \
	    "PyPI: about 5 GB, a few minutes on first install; for a CPU-only torch, see README)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --progress-bar on -r requirements-dev.txt
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP) ## Create .venv with everything the project needs.

POLICY_STAMP := policy/venv/.installed-$(shell sha256sum policy/requirements.txt | cut -c1-16)

$(POLICY_STAMP): policy/requirements.txt
	@echo "make: installing policy/requirements.txt into policy/venv (the policy pack's, about 100 MB)"
	test -x policy/venv/bin/python || $(PYTHON) -m venv policy/venv
	policy/venv/bin/python -m pip install --disable-pip-version-check --progress-bar on -r policy/requirements.txt
	rm -f policy/venv/.installed-* && touch $@

policy-venv: $(POLICY_STAMP) ## Create policy/venv, which `--policy-pack policy` runs the pack with.

test: lint check-shell check-workflows pytest ## Lint, offline checks and every test (what CI runs).

lint: $(STAMP) ## ruff check and ruff format --check.
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP) ## Apply ruff's fixes and formatting.
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

check-shell: $(STAMP) ## shellcheck every shell script.
	$(BIN)/shellcheck $(SHELL_SCRIPTS)

check-workflows: $(STAMP) ## Validate the GitHub workflows against their JSON schema, offline.
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows $(WORKFLOWS)

pytest: $(STAMP) ## Run the test suite (all but the real-engine and container suites), in parallel.
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest --ignore=tests/e2e -n $(PYTEST_WORKERS) --dist worksteal

test-fast: $(STAMP) ## pytest without the `slow` tests (real torchrun, runner, supervisor runs).
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest --ignore=tests/e2e -m 'not slow and not container' \
	    -n $(PYTEST_WORKERS) --dist worksteal

e2e-tools: ## Build (or find cached) the Pulumi CLI, providers and control plane for `make e2e`.
	scripts/e2e-tools.sh

e2e: $(STAMP) $(POLICY_STAMP) $(if $(PD_E2E_PULUMI),,e2e-tools) ## The real engine: pulumi preview/up/destroy against a local control plane.
	$(BIN)/python -m pytest tests/e2e -p no:cacheprovider

local: $(STAMP) $(if $(filter container,$(BACKEND)),image) ## Run the STACK's (default dev) training job here (BACKEND=process|container).
	$(BIN)/python -m tools.run_local --stack $(STACK) --backend $(BACKEND) \
	    $(if $(filter container,$(BACKEND)),$(if $(IMAGE),--image $(IMAGE)) $(if $(CONTAINER_RUNTIME),--container-runtime $(CONTAINER_RUNTIME)))

base-image: $(STAMP) ## Build (or find, cached in podman's store) the stand-in base image `make image` uses.
	PYTHON=$(BIN)/python scripts/build-base-image.sh

image: $(STAMP) ## Build STACK's image (trainer/, or its image.context) as IMAGE with podman (base image cached).
	PYTHON=$(BIN)/python STACK=$(STACK) scripts/build-image.sh $(IMAGE)

image-test: $(STAMP) ## The image and container tests: build, train in containers, push to a loopback registry.
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m container

checkpoint: $(STAMP) ## Copy STACK's newest checkpoint from its claim to OUT (default .checkpoints/STACK-retrieved).
	$(BIN)/python -m tools.retrieve --stack $(STACK) $(if $(OUT),--out $(OUT)) $(RETRIEVE_ARGS)

render: $(STAMP) ## Write the manifests STACK would apply to rendered/STACK/.
	$(BIN)/python -m tools.render --stack $(STACK) --out rendered/$(STACK)

# preview, up and destroy need the Pulumi CLI: without it, say so before building any virtual
# environment. The script's own checks (the stack file, the CLI) fail first and say why.
PULUMI_GOALS := $(filter preview up destroy,$(MAKECMDGOALS))
pulumi-cli: ## Check that the Pulumi CLI is installed (preview, up and destroy do it first).
	@command -v pulumi >/dev/null 2>&1 || scripts/pulumi-stack.sh $(firstword $(PULUMI_GOALS) preview) $(STACK)
ifneq ($(PULUMI_GOALS),)
$(STAMP) $(POLICY_STAMP): | pulumi-cli
endif

preview: pulumi-cli $(STAMP) $(POLICY_STAMP) ## pulumi preview --diff for STACK (needs the Pulumi CLI).
	PYTHON=$(BIN)/python scripts/pulumi-stack.sh preview $(STACK) $(PULUMI_ARGS)

up: pulumi-cli $(STAMP) $(POLICY_STAMP) ## pulumi up for STACK (needs the Pulumi CLI and a cluster).
	PYTHON=$(BIN)/python scripts/pulumi-stack.sh up $(STACK) $(PULUMI_ARGS)

destroy: pulumi-cli $(STAMP) ## pulumi destroy for STACK (checkpoints survive unless retainOnDestroy is false).
	PYTHON=$(BIN)/python scripts/pulumi-stack.sh destroy $(STACK) $(PULUMI_ARGS)

status: $(STAMP) ## STACK's job on its cluster: conditions, pods, events; follows the master's log to the end.
	$(BIN)/python -m tools.status --stack $(STACK) $(STATUS_ARGS)

bench: $(STAMP) ## Trainer throughput and checkpoint-stall benchmark.
	OMP_NUM_THREADS=1 $(BIN)/python bench/trainer_throughput.py

clean: ## Remove the virtual environment and local outputs (not .pulumi-state/ or .checkpoints/).
	rm -rf $(VENV) rendered .pytest_cache .ruff_cache
