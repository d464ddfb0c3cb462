# Every target builds the virtual environment it needs first, so each works on a fresh machine.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

# Variables a command line may set (`make up STACK=prod PULUMI_ARGS=--yes`): each `?=` line with
# a `##` comment, which `make help` lists (tests/test_makefile.py checks that all are there).
PYTHON ?= python3## the Python that creates .venv and policy/venv
VENV ?= .venv## where the virtual environment goes
REQUIREMENTS := requirements.txt policy/requirements.txt requirements-dev.txt requirements-docs.txt
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat $(REQUIREMENTS) | sha256sum | cut -c1-16)
STACK ?= dev## the stack, Pulumi.<STACK>.yaml: dev, prod, trainjob, digits, or local and digits-local (the one-machine cluster's)
PULUMI_ARGS ?=## more flags for pulumi preview|up|destroy (--yes, --expect-no-changes, --replace URN)
EVENT_LOG ?=## preview|up|destroy: also write the engine's events to this file, one JSON line each
OUT ?=## make checkpoint: where the copies go (default .checkpoints/<STACK>-retrieved); make plot: the PNG (default .checkpoints/<STACK>-run.png)
ROOT ?=## make plot: the run's directory or s3:// URL (default: STACK's bucket, or what make checkpoint or make local left in .checkpoints/)
RETRIEVE_ARGS ?=## make checkpoint: more flags (--all, --epoch 4, --image IMAGE)
STATUS_ARGS ?=## make status: more flags (--no-follow, --tail N)
LOGDIR ?=## make tensorboard: the directory of event files it reads, searched below (default .checkpoints/<STACK>-retrieved, what make checkpoint copied; .checkpoints/<STACK> for make local's runs)
TENSORBOARD_ARGS ?=## make tensorboard: more flags (--port 6007, --bind_all)
CONFIG_ARGS ?=## make config: what follows `pulumi config` ('set --path KEY VALUE', 'set --secret --path KEY' reading stdin, 'get KEY')
BACKEND ?= process## make local: process (torchrun here) or container (each replica a container of IMAGE)
CHECKPOINT_ROOT ?=## make local: where the run's checkpoints go: a directory (default .checkpoints/<STACK>) or s3://BUCKET[/PREFIX]
# The image's name and podman's OCI runtime for the image targets and the container backend come
# from tools/containers/defaults.env, which the scripts and the container backend read too.
include tools/containers/defaults.env
IMAGE ?=## make image / local BACKEND=container: the image (unset: STACK's own, tools/stack_image.py)
CONTAINER_RUNTIME ?= $(DEFAULT_CONTAINER_RUNTIME)## podman's OCI runtime (empty: podman's default)
export CONTAINER_RUNTIME
CLUSTER_REGISTRY_PORT ?= 5000## make cluster: its registry's port (Pulumi.local.yaml names 5000)
PYTEST_WORKERS ?= auto## make pytest / test-fast: pytest-xdist workers (0: one process)
E2E_WORKERS ?= 2## make e2e: pytest-xdist workers, each with a control plane of its own (0: one process)
PD_E2E_PULUMI ?=## make e2e: your own Pulumi CLI instead of the one make e2e-tools builds

# A stack whose kubeContext is the one-machine cluster's (Pulumi.local.yaml, a copy of it for your
# own code) runs on it: preview, up and destroy start the cluster when it is not running, and
# every target of the stack runs with its kubeconfig, Docker API, tools and registry password
# (cluster/). cluster/stacks.py says which stacks, with the system's python3 (no
# virtual environment yet), once, and only for the targets that read a stack; a stack naming the
# cluster's registry on another context is told so there.
STACK_GOALS := $(filter preview up destroy status checkpoint config,$(MAKECMDGOALS))
ifneq ($(STACK_GOALS),)
CLUSTER_STACK := $(shell $(PYTHON) -m cluster.stacks '$(STACK)' --registry-port '$(CLUSTER_REGISTRY_PORT)')
endif
ON_CLUSTER := $(if $(CLUSTER_STACK),$(BIN)/python -m cluster run --registry-port $(CLUSTER_REGISTRY_PORT) --)
# status and checkpoint read what runs: they never start it.
ON_RUNNING_CLUSTER := $(if $(CLUSTER_STACK),$(BIN)/python -m cluster run --no-start --)
# config needs only the cluster's Pulumi CLI, running or not.
WITH_CLUSTER_TOOLS := $(if $(CLUSTER_STACK),$(BIN)/python -m cluster run --tools-only --)

SHELL_SCRIPTS := $(wildcard trainer/*.sh scripts/*.sh bench/*.sh cluster/*.sh) .ci/run
WORKFLOWS := $(wildcard .github/workflows/*.yml)

.PHONY: checkpoint plot tensorboard cluster cluster-down cluster-status config docs docs-serve help venv policy-venv test test-fast e2e e2e-tools lint format check-shell check-workflows pytest local base-image image image-test render preview up destroy status bench clean pulumi-cli

help: ## List the targets and the variables they read.
	@grep -hE '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-16s %s\n", $$1, $$2}'
	@echo "Variables (make TARGET NAME=value):"
	@grep -hE '^[A-Z0-9_]+ \?=.*## ' $(MAKEFILE_LIST) | sed -E 's/^([A-Z0-9_]+) \?= ?([^#]*)## (.*)$$/\1\t\2\t\3/' | \
	    awk -F'\t' '{printf "  %-22s %s%s\n", $$1, $$3, ($$2 == "" || $$2 ~ /[$$]/ ? "" : " [" $$2 "]")}'

# uv installs (pinned in requirements-dev.txt, bootstrapped with the venv's own pip): it downloads
# in parallel and installs from its cache (~/.cache/uv) by hard links, so a second clone's venv
# takes seconds instead of minutes of unpacking 5 GB (pip's cache kept none of torch's wheels
# here). It names each large download as it starts. --system-certs: the platform's certificate
# store, as pip's. --compile-bytecode, as pip does: where PYTHONDONTWRITEBYTECODE is set (CI's
# machines), nothing writes .pyc later, and every torchrun worker would compile torch at import
# (make test took 13 minutes instead of 7). uv reads UV_DEFAULT_INDEX (not pip.conf) for
# another package index.
$(STAMP): $(REQUIREMENTS)
	@echo "make: installing requirements-dev.txt and requirements-docs.txt into $(VENV) with uv: the" \
	    "Pulumi SDK and providers, torch with its CUDA libraries from PyPI (about 5 GB: a minute or" \
	    "two on first install, under one from uv's cache; for a CPU-only torch, see README.md), the" \
	    "test tools, linters and MkDocs."
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --disable-pip-version-check --quiet "$$(grep -E '^uv==' requirements-dev.txt)"
	$(BIN)/uv pip install --python $(BIN)/python --system-certs --compile-bytecode \
	    -r requirements-dev.txt -r requirements-docs.txt
	rm -f $(VENV)/.installed-* && touch $@

venv: $(STAMP) ## Create .venv with everything the project needs.

POLICY_STAMP := policy/venv/.installed-$(shell sha256sum policy/requirements.txt | cut -c1-16)

# With .venv's uv (order only: a new .venv does not reinstall the pack's).
$(POLICY_STAMP): policy/requirements.txt | $(STAMP)
	@echo "make: installing policy/requirements.txt into policy/venv (the policy pack's, about 100 MB)"
	test -x policy/venv/bin/python || $(PYTHON) -m venv policy/venv
	$(BIN)/uv pip install --python policy/venv/bin/python --system-certs --compile-bytecode \
	    -r policy/requirements.txt
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
	$(BIN)/python -m pytest tests/e2e -p no:cacheprovider -n $(E2E_WORKERS) --dist loadgroup \
	    --no-loadscope-reorder

local: $(STAMP) $(if $(filter container,$(BACKEND)),image) ## Run the STACK's (default dev) training job here (BACKEND=process|container).
	$(BIN)/python -m tools.run_local --stack $(STACK) --backend $(BACKEND) \
	    $(if $(CHECKPOINT_ROOT),--checkpoint-root $(CHECKPOINT_ROOT)) \
	    $(if $(filter container,$(BACKEND)),$(if $(IMAGE),--image $(IMAGE)) $(if $(CONTAINER_RUNTIME),--container-runtime $(CONTAINER_RUNTIME)))

base-image: $(STAMP) ## Build (or find, cached in podman's store) the stand-in base image `make image` uses.
	PYTHON=$(BIN)/python scripts/build-base-image.sh

image: $(STAMP) ## Build STACK's image (trainer/, or its image.context) as IMAGE with podman (base image cached).
	PYTHON=$(BIN)/python STACK=$(STACK) scripts/build-image.sh $(IMAGE)

image-test: $(STAMP) ## The image and container tests: build, train in containers, push to a loopback registry.
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -m container

checkpoint: $(STAMP) ## Copy STACK's newest checkpoint from its claim to OUT (default .checkpoints/STACK-retrieved).
	@$(ON_RUNNING_CLUSTER) $(BIN)/python -m tools.retrieve --stack $(STACK) $(if $(OUT),--out $(OUT)) $(RETRIEVE_ARGS)

plot: $(STAMP) ## Draw STACK's run (loss, samples/s, checkpoint saves, restarts) to OUT (default .checkpoints/STACK-run.png), from ROOT or where it ran.
	@$(BIN)/python -m tools.plot_run --stack $(STACK) $(if $(ROOT),--root $(ROOT)) $(if $(OUT),--out $(OUT))

# TensorBoard finds the event files in every folder below LOGDIR: a run's tensorboard/, or several
# runs' to compare them (LOGDIR=.checkpoints).
TENSORBOARD_LOGDIR = $(or $(LOGDIR),.checkpoints/$(STACK)-retrieved)
tensorboard: $(STAMP) ## Open TensorBoard (http://localhost:6006) on LOGDIR (default .checkpoints/STACK-retrieved: the run make checkpoint copied).
	@test -d '$(TENSORBOARD_LOGDIR)' || { echo "make tensorboard: $(if $(LOGDIR),LOGDIR=$(LOGDIR) is not a directory,no $(TENSORBOARD_LOGDIR) yet: make checkpoint STACK=$(STACK) copies the run there (or name a directory with LOGDIR=DIR))" >&2; exit 2; }
	$(BIN)/tensorboard --logdir '$(TENSORBOARD_LOGDIR)' $(TENSORBOARD_ARGS)

render: $(STAMP) ## Write the manifests STACK would apply to rendered/STACK/.
	$(BIN)/python -m tools.render --stack $(STACK) --out rendered/$(STACK)

# preview, up, destroy and config need the Pulumi CLI: without it, say so before building any
# virtual environment. The script's own checks (the stack file, the CLI) fail first and say why.
# The one-machine cluster brings its own CLI (a stack of the cluster).
PULUMI_GOALS := $(filter preview up destroy config,$(MAKECMDGOALS))
pulumi-cli: ## Check that the Pulumi CLI is installed (preview, up, destroy and config do it first).
	@$(if $(CLUSTER_STACK),true,command -v pulumi >/dev/null 2>&1 || scripts/pulumi-stack.sh $(firstword $(PULUMI_GOALS) preview) $(STACK))
ifneq ($(PULUMI_GOALS),)
$(STAMP) $(POLICY_STAMP): | pulumi-cli
endif

PULUMI_STACK = EVENT_LOG=$(EVENT_LOG) PYTHON=$(BIN)/python $(ON_CLUSTER) scripts/pulumi-stack.sh

preview: pulumi-cli $(STAMP) $(POLICY_STAMP) ## pulumi preview --diff for STACK (needs the Pulumi CLI; a stack of the one-machine cluster: the cluster's).
	$(PULUMI_STACK) preview $(STACK) $(PULUMI_ARGS)

# A stack of the one-machine cluster refreshes first: each `make cluster` is a new cluster, on
# which the objects the state lists are gone until the refresh says so and the update creates
# them again.
up: pulumi-cli $(STAMP) $(POLICY_STAMP) ## pulumi up for STACK (needs the Pulumi CLI and a cluster; a stack of the one-machine cluster starts it).
	$(PULUMI_STACK) up $(STACK) $(if $(ON_CLUSTER),--refresh) $(PULUMI_ARGS)

destroy: pulumi-cli $(STAMP) ## pulumi destroy for STACK (checkpoints survive unless retainOnDestroy is false).
	$(PULUMI_STACK) destroy $(STACK) $(PULUMI_ARGS)

# On the backend the other targets use (.pulumi-state/ without a login), which a bare `pulumi`
# in your shell does not know of; the stack is created the first time.
config: pulumi-cli $(STAMP) ## pulumi config for STACK on make's backend: CONFIG_ARGS='set --secret --path KEY' (the value from stdin).
	@PYTHON=$(BIN)/python $(WITH_CLUSTER_TOOLS) scripts/pulumi-stack.sh config $(STACK) $(CONFIG_ARGS)

status: $(STAMP) ## STACK's job on its cluster: conditions, pods, events; follows the master's log to the end.
	@$(ON_RUNNING_CLUSTER) $(BIN)/python -m tools.status --stack $(STACK) $(STATUS_ARGS)

cluster: $(STAMP) ## Start the one-machine cluster in the background (Linux, root; the first time builds its tools).
	@$(BIN)/python -m cluster up --registry-port $(CLUSTER_REGISTRY_PORT)

cluster-status: $(STAMP) ## What of the one-machine cluster runs, and whether each part answers.
	@$(BIN)/python -m cluster status

cluster-down: $(STAMP) ## Stop the one-machine cluster; nothing of it is left (processes, mounts, namespaces).
	@$(BIN)/python -m cluster down

DOCS_ADDR ?= 127.0.0.1:8000## make docs-serve: where the site is served
# MkDocs 1.x prints a banner about its successor on every run; it says nothing about this site.
MKDOCS := NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs

docs: $(STAMP) ## Build the documentation site into site/ (strict: any warning fails).
	$(MKDOCS) build --strict

docs-serve: $(STAMP) ## Serve the documentation at DOCS_ADDR, rebuilding on every change.
	$(MKDOCS) serve --strict --dev-addr $(DOCS_ADDR)

bench: $(STAMP) ## Trainer throughput and checkpoint-stall benchmark.
	OMP_NUM_THREADS=1 $(BIN)/python bench/trainer_throughput.py

clean: ## Remove the virtual environment and local outputs (not .pulumi-state/, .checkpoints/ or .cluster/).
	rm -rf $(VENV) rendered site .pytest_cache .ruff_cache
