#!/usr/bin/env bash
# A plain-HTTP OCI registry on loopback (Debian's docker-registry, the CNCF distribution
# registry), for pushing the training image without a cloud registry.
#
#   cluster/local-registry.sh start DIR [PORT] [--user NAME]   # default port 5000
#   cluster/local-registry.sh stop DIR
#
# `start` prints 127.0.0.1:PORT once the registry answers. DIR holds the registry's config,
# storage, log and pid file. It listens on 127.0.0.1 only. With `--user NAME` it requires
# authentication (htpasswd, bcrypt): NAME's password is read from the environment variable
# LOCAL_REGISTRY_PASSWORD, never from the command line; without it, anyone on this machine may
# push and pull. tools/containers/registries.conf marks 127.0.0.1:5000 insecure (plain HTTP) for
# podman; a registry on another port needs its own registries.conf entry.
set -euo pipefail
# shellcheck source=scripts/container-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/../scripts/container-env.sh"

usage() {
  echo "usage: $0 start DIR [PORT] [--user NAME] | stop DIR" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
shift 2
pid_file=$dir/registry.pid

case $action in
  start)
    port=5000 user=""
    while [[ $# -gt 0 ]]; do
      case $1 in
        --user)
          [[ $# -ge 2 && -n $2 ]] || usage
          user=$2
          shift 2
          ;;
        *)
          [[ $1 =~ ^[0-9]+$ ]] || {
            echo "local-registry.sh: PORT must be a port number, got '$1'" >&2
            exit 2
          }
          port=$1
          shift
          ;;
      esac
    done
    need_commands docker-registry:docker-registry curl:curl
    mkdir -p "$dir/storage"
    auth=""
    if [[ -n $user ]]; then
      [[ -n ${LOCAL_REGISTRY_PASSWORD:-} ]] || {
        echo "local-registry.sh: --user $user needs its password in LOCAL_REGISTRY_PASSWORD" >&2
        exit 2
      }
      need_commands htpasswd:apache2-utils
      (umask 077 && printf '%s' "$LOCAL_REGISTRY_PASSWORD" | htpasswd -iBn "$user" >"$dir/htpasswd")
      auth="auth:
  htpasswd:
    realm: pytorch-distributed-local
    path: $dir/htpasswd"
    fi
    cat >"$dir/config.yml" <<YAML
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
$auth
YAML
    docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
    echo $! >"$pid_file"
    for _ in $(seq 100); do
      # Up once /v2/ answers: 200 without auth, 401 (a challenge) with it.
      code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v2/" 2>/dev/null || true)
      if [[ $code == 200 || ($code == 401 && -n $user) ]]; then
        echo "127.0.0.1:$port"
        exit 0
      fi
      kill -0 "$(cat "$pid_file")" 2>/dev/null || break
      sleep 0.1
    done
    echo "local-registry.sh: the registry did not come up on 127.0.0.1:$port" >&2
    cat "$dir/registry.log" >&2
    exit 1
    ;;
  stop)
    if [[ -f $pid_file ]]; then
      kill "$(cat "$pid_file")" 2>/dev/null || true
      rm -f "$pid_file"
    fi
    ;;
  *)
    usage
    ;;
esac
