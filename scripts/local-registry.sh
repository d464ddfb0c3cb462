#!/usr/bin/env bash
# A plain-HTTP OCI registry on loopback (Debian's docker-registry, the CNCF distribution
# registry), for pushing the training image without a cloud registry.
#
#   scripts/local-registry.sh start DIR [PORT]   # default port 5000; prints 127.0.0.1:PORT
#   scripts/local-registry.sh stop DIR
#
# DIR holds the registry's config, storage, log and pid file. It listens on 127.0.0.1 only and
# has no auth: tools/containers/registries.conf marks 127.0.0.1:5000 insecure (plain HTTP) for
# podman; a registry on another port needs its own registries.conf entry.
set -euo pipefail
# shellcheck source=scripts/container-env.sh
source "$(dirname "${BASH_SOURCE[0]}")/container-env.sh"

usage() {
  echo "usage: $0 start DIR [PORT] | stop DIR" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
action=$1
dir=$(mkdir -p "$2" && cd "$2" && pwd)
pid_file=$dir/registry.pid

case $action in
  start)
    port=${3:-5000}
    [[ $port =~ ^[0-9]+$ ]] || {
      echo "local-registry.sh: PORT must be a port number, got '$port'" >&2
      exit 2
    }
    need_commands docker-registry:docker-registry curl:curl
    mkdir -p "$dir/storage"
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
YAML
    docker-registry serve "$dir/config.yml" >"$dir/registry.log" 2>&1 &
    echo $! >"$pid_file"
    for _ in $(seq 100); do
      if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
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
