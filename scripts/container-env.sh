#!/usr/bin/env bash
# Sourced by the image and registry scripts: the container tools they need, and this project's
# own podman configuration. Nothing here edits the machine's global configuration: podman reads
# tools/containers/*.conf through CONTAINERS_CONF / CONTAINERS_REGISTRIES_CONF, which a caller
# may point elsewhere (or at /dev/null to use only podman's built-in defaults).
#
#   CONTAINER_RUNTIME  OCI runtime podman uses (`podman --runtime`); default in
#                      tools/containers/defaults.env (runc). Empty: podman's default.

repo_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=/dev/null  # NAME=value lines: tools/containers/defaults.env
source "$repo_root/tools/containers/defaults.env"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$repo_root/$CONTAINERS_CONF_FILE}
export CONTAINERS_REGISTRIES_CONF=${CONTAINERS_REGISTRIES_CONF:-$repo_root/$CONTAINERS_REGISTRIES_CONF_FILE}
CONTAINER_RUNTIME=${CONTAINER_RUNTIME-$DEFAULT_CONTAINER_RUNTIME}

# `need_commands CMD:debian-package...`: install the Debian packages of missing commands (CI runs
# on a clean Debian as root); elsewhere say what to install and stop.
need_commands() {
  local entry missing=()
  for entry in "$@"; do
    command -v "${entry%%:*}" >/dev/null 2>&1 || missing+=("${entry#*:}")
  done
  [[ ${#missing[@]} -gt 0 ]] || return 0
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ${missing[*]} (apt-get)" >&2
    "$repo_root/scripts/apt-get.sh" update -qq >&2
    DEBIAN_FRONTEND=noninteractive "$repo_root/scripts/apt-get.sh" install -y -qq --no-install-recommends \
      "${missing[@]}" >&2
  else
    echo "missing: ${missing[*]}; install them with your package manager" >&2
    return 1
  fi
}

# podman with this project's runtime choice; use it as "${podman[@]}" ...
podman=(podman)
if [[ -n $CONTAINER_RUNTIME ]]; then
  podman+=(--runtime "$CONTAINER_RUNTIME")
fi
export CONTAINER_RUNTIME
