#!/usr/bin/env bash
# `make preview|up|destroy|config STACK=<stack>`: run the real Pulumi CLI on one stack.
#
# Usage: scripts/pulumi-stack.sh <preview|up|destroy|config> <stack> [pulumi flags...]
#
# Flags after the stack go to `pulumi preview|up|destroy` as they are (`make up STACK=dev
# PULUMI_ARGS=--yes` passes --yes; `--expect-no-changes`, `--replace URN`, ...); for config, the
# words after `pulumi config` (`make config STACK=dev CONFIG_ARGS='set --path KEY VALUE'`): the
# same backend as the other actions, which a bare `pulumi config` without a login would not use.
# Backend: whatever you are logged in to (`pulumi login ...`) or PULUMI_BACKEND_URL names; with
# neither, the local file backend .pulumi-state/ in this checkout. A file backend encrypts the
# stack's secrets with PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE), taken from
# the environment. preview and up run the policy pack (policy/) with policy/config/<stack>.json,
# or with the pack's defaults when the stack has none (and say so).
# up and destroy ask for confirmation on a terminal; elsewhere set PULUMI_SKIP_CONFIRMATIONS=true.
#
# From the Makefile, not the user: EVENT_LOG (`make up EVENT_LOG=FILE`: the engine's events also
# go to FILE, JSON lines) and CLUSTER_REGISTRY_PASSWORD_FILE (set by `python -m cluster
# run` for STACK=local: the stack's secret registryPassword follows the cluster's registry).
#
# The command itself runs through tools/pulumi_run.py (python3, standard library only): it selects
# the stack (creating it the first time); before the command, what a killed pulumi command left
# on a file backend (an empty metadata file beside the state, a lock) is removed and the
# operations an interrupted update left unfinished are resolved; after a failure, one line says
# why and what the next command does. docs/how-to/recover-failed-update.md lists them.
set -euo pipefail

die() {
  echo "pulumi-stack.sh: $*" >&2
  exit 1
}

[[ $# -ge 2 ]] || die "usage: scripts/pulumi-stack.sh <preview|up|destroy|config> <stack> [pulumi flags...]"
action=$1
stack=$2
shift 2
case $action in
  preview | up | destroy | config) ;;
  *) die "unknown action '$action': expected preview, up, destroy or config" ;;
esac
[[ $stack =~ ^[A-Za-z0-9._-]+$ ]] || die "invalid stack name '$stack'"

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
[[ -f "Pulumi.$stack.yaml" ]] || die "no stack file Pulumi.$stack.yaml in $repo"

if ! command -v pulumi >/dev/null 2>&1; then
  die "the Pulumi CLI is not installed ('pulumi' is not on PATH).
  Install it (https://www.pulumi.com/docs/iac/download-install/), then run this again.
  Without it: 'make render STACK=$stack' writes the manifests, 'make local' runs the job here."
fi

if [[ -z ${PULUMI_BACKEND_URL:-} ]] && ! pulumi whoami >/dev/null 2>&1; then
  export PULUMI_BACKEND_URL="file://$repo/.pulumi-state"
  mkdir -p .pulumi-state
  echo "pulumi-stack.sh: no backend configured; using the local file backend .pulumi-state/" \
    "(\`make config STACK=$stack CONFIG_ARGS='...'\` sets its config; for a bare pulumi in your" \
    "shell: export PULUMI_BACKEND_URL=$PULUMI_BACKEND_URL)" >&2
fi
if [[ ${PULUMI_BACKEND_URL:-} == file://* && -z ${PULUMI_CONFIG_PASSPHRASE:-} &&
  -z ${PULUMI_CONFIG_PASSPHRASE_FILE:-} ]]; then
  die "the file backend ${PULUMI_BACKEND_URL} encrypts stack secrets with a passphrase:
  export PULUMI_CONFIG_PASSPHRASE (or PULUMI_CONFIG_PASSPHRASE_FILE) and run this again."
fi

policy=(--policy-pack policy)
if [[ -f "policy/config/$stack.json" ]]; then
  policy+=(--policy-pack-config "policy/config/$stack.json")
elif [[ $action == preview || $action == up ]]; then
  echo "pulumi-stack.sh: stack $stack has no policy/config/$stack.json: the policy pack runs with its defaults (no opt-outs: docs/reference/policy.md)" >&2
fi

case $action in
  preview | up) argv=(pulumi "$action" --stack "$stack" --diff "${policy[@]}" "$@") ;;
  destroy) argv=(pulumi destroy --stack "$stack" "$@") ;;
  config) argv=(pulumi config --stack "$stack" "$@") ;;
esac
command -v "${PYTHON:-python3}" >/dev/null 2>&1 ||
  die "no ${PYTHON:-python3} on PATH: install Python 3 (the Pulumi program needs it too)"
options=()
[[ -z ${EVENT_LOG:-} ]] || options+=(--event-log "$EVENT_LOG")
[[ -z ${CLUSTER_REGISTRY_PASSWORD_FILE:-} ]] ||
  options+=(--registry-password-file "$CLUSTER_REGISTRY_PASSWORD_FILE")
exec "${PYTHON:-python3}" -m tools.pulumi_run "$action" "$stack" ${options[@]+"${options[@]}"} -- "${argv[@]}"
