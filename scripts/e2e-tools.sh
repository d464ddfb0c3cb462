#!/usr/bin/env bash
# Builds the real-engine e2e tools from the Go module proxy and Debian's packages, into a cache
# outside the clone, and prints the directory that holds them (the last line on stdout).
#
#   scripts/e2e-tools.sh            build what is missing, print the bin directory
#   scripts/e2e-tools.sh --print    print the bin directory only (nothing is built)
#
# Versions match the Python pins in requirements.txt (pulumi, pulumi-kubernetes). They are what
# the Go module proxy this project can reach actually serves: pkg/v3 v3.272.0 is refused there,
# so the CLI and the Python SDK are both pinned to 3.260.0; the Kubernetes provider is served
# only at the commit of its v4.25.0 tag, so the Python SDK is pinned to 4.25.0 too.
# A cold build takes tens of minutes on 2 cores; later runs (and CI on the same machine) reuse it.
set -euo pipefail

PULUMI_VERSION=3.260.0
# The release tag's commit: pulumi-kubernetes tags only v4.x at the repository root, so the
# provider/v4 module is required by pseudo-version.
KUBERNETES_PROVIDER_VERSION=4.25.0
KUBERNETES_PROVIDER_MODULE_VERSION=v4.0.0-20260115033456-f47bc2d6f199
# provider/v4 replaces its own sdk/v4 with ../sdk; the proxy serves no sdk/v4 v4.25.0, so a
# published one it does serve stands in for the two helper packages that use it: the newest
# whose pulumi sdk/v3 requirement does not lift sdk/v3 past the provider's pkg/v3 (a newer
# sdk/v4 pulls sdk/v3 forward and pkg/v3 v3.215.0 no longer compiles against it).
KUBERNETES_PROVIDER_SDK_VERSION=v4.22.2
KUBERNETES_VERSION=1.34.2
TRAINING_OPERATOR_VERSION=1.9.3
KWOK_VERSION=0.8.0
# The CLI runs a Python policy pack through `pulumi-analyzer-policy-python` when no Python
# language plugin is installed; sdk/v3 shipped that script until v3.219.0.
POLICY_SHIM_SDK_VERSION=3.219.0

key="pulumi-${PULUMI_VERSION}_kubernetes-provider-${KUBERNETES_PROVIDER_VERSION}_kubernetes-${KUBERNETES_VERSION}_training-operator-${TRAINING_OPERATOR_VERSION}_kwok-${KWOK_VERSION}"
root="${PD_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pytorch-distributed/e2e}/$key"
bin="$root/bin"

if [[ ${1:-} == --print ]]; then
  echo "$bin"
  exit 0
fi

mkdir -p "$bin" "$root/src"
export GOFLAGS=-mod=mod GOTOOLCHAIN=local CGO_ENABLED=0
started=$SECONDS

say() { printf '[e2e-tools %4ds] %s\n' $((SECONDS - started)) "$*" >&2; }

# Runs a long command in the background and prints a line a minute, so CI logs show progress.
with_progress() {
  local what=$1
  shift
  local log="$root/src/${what//[^A-Za-z0-9.-]/_}.log"
  "$@" >"$log" 2>&1 &
  local pid=$! waited=0
  while kill -0 "$pid" 2>/dev/null; do
    sleep 5
    waited=$((waited + 5))
    ((waited % 60 == 0)) && say "  ... $what still building (${waited}s)"
  done
  if ! wait "$pid"; then
    say "FAILED: $what; last lines of $log:"
    tail -n 40 "$log" >&2
    exit 1
  fi
}

# A wrapper module that requires $module@$version and repeats its replace directives with
# published versions, because `go install module@version` refuses modules that have any.
wrapper_module() {
  local dir=$1 module=$2 version=$3
  shift 3
  rm -rf "$dir" && mkdir -p "$dir"
  (
    cd "$dir"
    go mod init "e2e-tools.local/$(basename "$dir")" >/dev/null 2>&1
    go mod edit -require "$module@$version"
    local replacement
    for replacement in "$@"; do go mod edit -replace "$replacement"; done
  )
}

build_pulumi() {
  local dir="$root/src/pulumi"
  wrapper_module "$dir" github.com/pulumi/pulumi/pkg/v3 "v$PULUMI_VERSION" \
    "github.com/pulumi/pulumi/sdk/v3=github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" \
    "github.com/atotto/clipboard=github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e"
  cd "$dir"
  go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    -o "$bin/pulumi.tmp" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
  mv "$bin/pulumi.tmp" "$bin/pulumi"
}

build_kubernetes_provider() {
  local module=github.com/pulumi/pulumi-kubernetes/provider/v4
  local dir="$root/src/pulumi-kubernetes"
  local source
  source=$(go mod download -json "$module@$KUBERNETES_PROVIDER_MODULE_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  rm -rf "$dir" && cp -r "$source" "$dir" && chmod -R u+w "$dir"
  cd "$dir"
  go mod edit -dropreplace github.com/pulumi/pulumi-kubernetes/sdk/v4 \
    -replace "github.com/pulumi/pulumi-kubernetes/sdk/v4=github.com/pulumi/pulumi-kubernetes/sdk/v4@$KUBERNETES_PROVIDER_SDK_VERSION"
  # schema-embed.json and terraform-mapping-embed.json are git-ignored upstream and made by
  # `go generate` from schema.json, as the provider's Makefile does.
  (cd cmd/pulumi-resource-kubernetes && VERSION="$KUBERNETES_PROVIDER_VERSION" go generate ./...)
  go build -trimpath \
    -ldflags "-s -w -X $module/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION" \
    -o "$bin/pulumi-resource-kubernetes.tmp" ./cmd/pulumi-resource-kubernetes
  mv "$bin/pulumi-resource-kubernetes.tmp" "$bin/pulumi-resource-kubernetes"
}

build_kubernetes() {
  local dir="$root/src/kubernetes" source replacements=() staging
  source=$(go mod download -json "k8s.io/kubernetes@v$KUBERNETES_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  # Each staging module (replaced by ./staging/src/k8s.io/<name> upstream) by its published twin.
  while read -r staging; do
    replacements+=("$staging=$staging@v0.${KUBERNETES_VERSION#1.}")
  done < <(sed -n 's#^\t\(k8s.io/[a-z-]*\) => ./staging/src/.*#\1#p' "$source/go.mod")
  wrapper_module "$dir" k8s.io/kubernetes "v$KUBERNETES_VERSION" "${replacements[@]}"
  cd "$dir"
  local minor=${KUBERNETES_VERSION#1.}
  minor=${minor%%.*}
  local ldflags="-s -w"
  local pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=v$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ldflags+=" -X $pkg.gitTreeState=clean"
  done
  local component
  for component in kube-apiserver kube-controller-manager kube-scheduler; do
    [[ -x $bin/$component ]] && continue
    go build -trimpath -ldflags "$ldflags" -o "$bin/$component.tmp" "k8s.io/kubernetes/cmd/$component"
    mv "$bin/$component.tmp" "$bin/$component"
  done
}

build_training_operator() {
  local module=github.com/kubeflow/training-operator
  GOBIN="$root/src/gobin" go install -trimpath -ldflags "-s -w" \
    "$module/cmd/training-operator.v1@v$TRAINING_OPERATOR_VERSION"
  mv "$root/src/gobin/training-operator.v1" "$bin/training-operator"
  local source
  source=$(go mod download -json "$module@v$TRAINING_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$root/crds"
  cp "$source/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" "$root/crds/"
}

build_kwok() {
  GOBIN="$root/src/gobin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  # kwok plays no stage unless configured: the same "fast" node and pod stages kwokctl uses.
  local source
  source=$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  mkdir -p "$root/kwok-stages"
  cp "$source"/kustomize/stage/node/fast/node-initialize.yaml \
    "$source"/kustomize/stage/pod/fast/pod-{ready,complete,delete}.yaml "$root/kwok-stages/"
  mv "$root/src/gobin/kwok" "$bin/kwok"
}

fetch_policy_shim() {
  local source
  source=$(go mod download -json "github.com/pulumi/pulumi/sdk/v3@v$POLICY_SHIM_SDK_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  install -m 0755 "$source/python/dist/pulumi-analyzer-policy-python" "$bin/pulumi-analyzer-policy-python"
}

install_etcd() {
  command -v etcd >/dev/null && { ln -sf "$(command -v etcd)" "$bin/etcd"; return; }
  [[ -x /usr/bin/etcd ]] || {
    say "installing Debian's etcd-server (apt-get)"
    if [[ $(id -u) -ne 0 ]]; then
      say "etcd is missing: run 'sudo apt-get install etcd-server' (or put etcd on PATH)"
      exit 1
    fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends etcd-server >&2
    # Debian starts the packaged service; the fixture runs its own etcd on a free port.
    systemctl disable --now etcd >/dev/null 2>&1 || true
  }
  ln -sf /usr/bin/etcd "$bin/etcd"
}

step=0
run_step() {
  local output=$1 what=$2 fn=$3
  step=$((step + 1))
  if [[ -e $bin/$output ]]; then
    say "($step/8) $what: cached"
    return
  fi
  say "($step/8) $what: building"
  with_progress "$what" "$fn"
  say "($step/8) $what: done"
}

run_step pulumi "pulumi CLI v$PULUMI_VERSION" build_pulumi
run_step pulumi-resource-kubernetes "kubernetes provider v$KUBERNETES_PROVIDER_VERSION" build_kubernetes_provider
run_step pulumi-analyzer-policy-python "policy-pack shim (sdk/v3 v$POLICY_SHIM_SDK_VERSION)" fetch_policy_shim
run_step kube-apiserver "kube-apiserver v$KUBERNETES_VERSION" build_kubernetes
run_step kube-controller-manager "kube-controller-manager v$KUBERNETES_VERSION" build_kubernetes
run_step kube-scheduler "kube-scheduler v$KUBERNETES_VERSION" build_kubernetes
run_step training-operator "training-operator v$TRAINING_OPERATOR_VERSION" build_training_operator
run_step kwok "kwok v$KWOK_VERSION" build_kwok
install_etcd
say "tools ready in $bin"
echo "$bin"
