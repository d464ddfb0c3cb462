#!/usr/bin/env bash
# Builds the real-engine e2e tools from the Go module proxy, Debian's packages and the upstream
# sources in ../shared/vendor/, into a cache outside the clone, and prints the directory that
# holds them (the last line on stdout).
#
#   scripts/e2e-tools.sh           build what is missing, print the bin directory
#   scripts/e2e-tools.sh --print   print the bin directory only (nothing is built)
#
# Each tool is cached in a directory of its own, named after its version and a hash of its build
# recipe (its build function, the helpers it calls and the values of the variables they read, the
# vendored archives' sha256 among them): changing one version or one recipe rebuilds that tool
# alone, and an unrelated commit rebuilds nothing. The bin directory printed last links them
# together. Every tool directory holds a PROVENANCE file (where the binary comes from and how it
# was built), printed as the tool is found or built.
#
# Up to PD_E2E_BUILD_JOBS tools (default 2) build at once, the longest first: one build's module
# downloads, go generate steps and single-threaded links leave the CPU to another's compiles.
# A tool that reuses another's compiled packages (the language host the CLI's sdk/v3 and pkg/v3,
# etcd Kubernetes') waits for it. With PD_TIMINGS_FILE set, each tool appends
# `e2e tool NAME<TAB>SECONDS<TAB>built|cached` to it (the timing table of .ci/run).
#
# Versions match the Python pins in requirements.txt (pulumi, pulumi-kubernetes, pulumi-docker).
# They are what the Go module proxy this project can reach actually serves: pkg/v3 v3.272.0 is
# refused there, so the CLI and the Python SDK are both pinned to 3.260.0; the Kubernetes provider
# is served only at the commit of its v4.25.0 tag, so the Python SDK is pinned to 4.25.0 too. The
# Python language host and the Docker provider are not served by the proxy at all: they are built
# from the archives in ../shared/vendor/ (PD_VENDOR_DIR overrides), each checked against its
# sha256 first, their dependencies from the proxy as usual. Nothing is downloaded at run time.
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
# etcd as Kubernetes 1.34.2 requires it (its go.mod's go.etcd.io/etcd/*/v3 v3.6.4), built from the
# proxy: Debian's etcd-server 3.4.23 lacks watch progress requests (3.4.31 and 3.5.13 have them),
# and over it the API server refuses client-go's streamed lists ("the required storage feature
# RequestWatchProgress is disabled"), which kwok and the controller manager then retried with
# backoff: pods ran and deletions finished 30 to 50 seconds late.
ETCD_VERSION=3.6.4
TRAINING_OPERATOR_VERSION=1.9.4
KWOK_VERSION=0.8.0
# Kubeflow Trainer v2 (TrainJob, TrainingRuntime) and the JobSet controller it runs jobs on; the
# pair Trainer v2.3.0 installs (its manifests/third-party/jobset pins JobSet v0.12.0).
TRAINER_VERSION=2.3.0
JOBSET_VERSION=0.12.0
# Kueue, the job queueing controller (LocalQueue, ClusterQueue, Workload), with its PyTorchJob and
# TrainJob integrations; the proxy serves v0.17.0 by exact version, though its list omits it.
KUEUE_VERSION=0.17.0
# The Python language host: sdk/python/cmd/pulumi-language-python of pulumi at this commit (the
# development tree of 3.260.0), built against the published sdk/v3 and pkg/v3 v3.260.0.
LANGUAGE_PYTHON_ARCHIVE=pulumi-language-python-1b5949891b3c.tar.gz
LANGUAGE_PYTHON_SHA256=0aa332f71a9f056067bc8670aa7418952cbf1eae7d9fe783b124a05b55ac3a8e
# The YAML language host, for the YAML program that uses the component package
# (examples/yaml-program): pulumi-yaml's newest release whose pkg/v3 requirement (v3.257.0) is not
# past the CLI's, so it builds in the CLI's module graph.
PULUMI_YAML_VERSION=1.38.3
DOCKER_PROVIDER_VERSION=4.11.2
DOCKER_PROVIDER_ARCHIVE=pulumi-docker-v$DOCKER_PROVIDER_VERSION.tar.gz
DOCKER_PROVIDER_SHA256=41a3cf1c89a934197a3384db35934b18bad11ba44b492cdb5051fd10e6c590f4
# v4.11.2 requires terraform-bridge v3.125.0, which the proxy refuses (its .mod answers 403; the
# version list stops at v3.120.0). v3.120.0 builds, and a stack's build, push, registry lookup
# and delete work with it. PROVENANCE says so.
DOCKER_PROVIDER_BRIDGE_VERSION=v3.120.0
# The real node's pieces (tests/support/real_node.py): its kubelet is the API server's version, from the
# same wrapper module; CoreDNS with the kubernetes plugin (and the few it needs), from the proxy;
# the sandbox ("pause") image built here, since its public registry cannot be reached (its
# version is the image's tag; a change of build_pause rebuilds it all the same). The init
# container image replaces the training operator's default alpine:3.10 (Docker Hub) for every
# plane. containerd, runc and the CNI plugins are Debian's.
COREDNS_VERSION=1.15.0
PAUSE_IMAGE_VERSION=1
INIT_IMAGE_VERSION=3
# The real node's NetworkPolicy agent: kubernetes-sigs' reference implementation, which enforces
# NetworkPolicy for any CNI (the node's is the plain bridge plugin, which enforces none) from a
# host process, with nftables and nfqueue spoken over netlink (no iptables or nft binary), and no
# image to pull (where the kernel lacks nftables' queue expression, as this machine's does, the
# node queues for it: cluster/network_policy_agent.py). v0.8.0 is the newest the Go module proxy
# serves. Its build, on 2 cores: 390 s cold (empty module and build caches; 160 s of it the
# downloads), 230 s with the modules already downloaded, 5 s with a warm build cache (measured
# alone, with a Go build cache of its own: its client-go v0.32 is no other tool's, so the others'
# compiles save it little).
KUBE_NETWORK_POLICIES_VERSION=0.8.0

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cache=${PD_E2E_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pytorch-distributed/e2e}
tools=$cache/tools
started=$SECONDS

say() { printf '[e2e-tools %4ds] %s\n' $((SECONDS - started)) "$*" >&2; }

module_dir() { go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'; }

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

# The vendored archive $1, checked against sha256 $2, unpacked into $work/src.
vendored_source() {
  local archive=$1 sha256=$2 vendor=${PD_VENDOR_DIR:-}
  if [[ -z $vendor ]]; then
    # Beside the clone; for a git worktree, also beside the repository it belongs to.
    local candidate main
    main=$(cd "$(git -C "$repo" rev-parse --git-common-dir 2>/dev/null || echo "$repo")/.." && pwd)
    for candidate in "$repo/../shared/vendor" "$main/../shared/vendor"; do
      [[ -f $candidate/$archive ]] && vendor=$candidate && break
    done
  fi
  if [[ -z $vendor || ! -f $vendor/$archive ]]; then
    echo "$archive not found: expected in ../shared/vendor/ beside the clone (or set PD_VENDOR_DIR)" >&2
    return 1
  fi
  echo "$sha256  $vendor/$archive" | sha256sum --check --quiet - || {
    echo "$vendor/$archive does not match its sha256 $sha256" >&2
    return 1
  }
  mkdir -p "$work/src"
  tar -xzf "$vendor/$archive" -C "$work/src"
  echo "$(cd "$vendor" && pwd)/$archive"
}

# Each build function puts its binaries in $out/bin (data in $out/share) and its provenance,
# one line each, in $out/PROVENANCE; $work is scratch space removed afterwards.

build_pulumi() {
  wrapper_module "$work/mod" github.com/pulumi/pulumi/pkg/v3 "v$PULUMI_VERSION" \
    "github.com/pulumi/pulumi/sdk/v3=github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" \
    "github.com/atotto/clipboard=github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e"
  cd "$work/mod"
  go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    -o "$out/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi
  echo "pulumi: github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION cmd/pulumi, Go module proxy" >"$out/PROVENANCE"
}

build_language_python() {
  local archive
  archive=$(vendored_source "$LANGUAGE_PYTHON_ARCHIVE" "$LANGUAGE_PYTHON_SHA256")
  cd "$work"/src/pulumi-language-python-*/sdk/python/cmd/pulumi-language-python
  # Upstream replaces sdk/v3 and pkg/v3 with directories of the pulumi repository that the
  # archive does not hold: the published modules of the same version stand in.
  go mod edit \
    -replace "github.com/pulumi/pulumi/sdk/v3=github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" \
    -replace "github.com/pulumi/pulumi/pkg/v3=github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION"
  go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=v$PULUMI_VERSION" \
    -o "$out/bin/pulumi-language-python" .
  install -m 0755 ../pulumi-language-python-exec "$out/bin/pulumi-language-python-exec"
  cat >"$out/PROVENANCE" <<EOF
pulumi-language-python: $archive (sha256 $LANGUAGE_PYTHON_SHA256), github.com/pulumi/pulumi at 1b5949891b3c sdk/python/cmd/pulumi-language-python, sdk/v3 and pkg/v3 v$PULUMI_VERSION from the Go module proxy
pulumi-language-python-exec: the same archive, unchanged
EOF
}

# Built in the CLI's module graph, so every package the two share is the same compile and the build
# cache the CLI's build left serves it: only pulumi-yaml's own packages compile (15 s instead of
# 60). Its source is the main module, each requirement it shares with pkg/v3 v$PULUMI_VERSION set
# to pkg/v3's version (it asks a few newer ones), and sdk/v3 replaced as the CLI's wrapper does:
# a replace alone would keep its own versions in the compiled paths (-trimpath writes the
# required version), and the compiles would differ.
build_language_yaml() {
  local dir=$work/pulumi-yaml pkg_mod path version requirements=()
  cp -r "$(module_dir "github.com/pulumi/pulumi-yaml@v$PULUMI_YAML_VERSION")" "$dir" && chmod -R u+w "$dir"
  pkg_mod=$(module_dir "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION")/go.mod
  cd "$dir"
  while read -r path version; do
    if grep -q "^	$path v" go.mod; then requirements+=(-require "$path@$version"); fi
  done < <(awk '/^\t/ && NF >= 2 {print $1, $2}' "$pkg_mod")
  go mod edit "${requirements[@]}" \
    -require "github.com/pulumi/pulumi/pkg/v3@v$PULUMI_VERSION" \
    -require "github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" \
    -replace "github.com/pulumi/pulumi/sdk/v3=github.com/pulumi/pulumi/sdk/v3@v$PULUMI_VERSION" \
    -replace "github.com/atotto/clipboard=github.com/tgummerer/clipboard@v0.0.0-20241001131231-d02d263e614e"
  go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi-yaml/pkg/version.Version=v$PULUMI_YAML_VERSION" \
    -o "$out/bin/pulumi-language-yaml" ./cmd/pulumi-language-yaml
  echo "pulumi-language-yaml: github.com/pulumi/pulumi-yaml@v$PULUMI_YAML_VERSION cmd/pulumi-language-yaml, Go module proxy, in pulumi pkg/v3 v$PULUMI_VERSION's module graph" >"$out/PROVENANCE"
}

build_kubernetes_provider() {
  local module=github.com/pulumi/pulumi-kubernetes/provider/v4
  local dir=$work/pulumi-kubernetes
  cp -r "$(module_dir "$module@$KUBERNETES_PROVIDER_MODULE_VERSION")" "$dir" && chmod -R u+w "$dir"
  cd "$dir"
  go mod edit -dropreplace github.com/pulumi/pulumi-kubernetes/sdk/v4 \
    -replace "github.com/pulumi/pulumi-kubernetes/sdk/v4=github.com/pulumi/pulumi-kubernetes/sdk/v4@$KUBERNETES_PROVIDER_SDK_VERSION"
  # schema-embed.json and terraform-mapping-embed.json are git-ignored upstream and made by
  # `go generate` from schema.json, as the provider's Makefile does.
  (cd cmd/pulumi-resource-kubernetes && VERSION="$KUBERNETES_PROVIDER_VERSION" go generate ./...)
  go build -trimpath \
    -ldflags "-s -w -X $module/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION" \
    -o "$out/bin/pulumi-resource-kubernetes" ./cmd/pulumi-resource-kubernetes
  echo "pulumi-resource-kubernetes: $module@$KUBERNETES_PROVIDER_MODULE_VERSION (tag v$KUBERNETES_PROVIDER_VERSION), sdk/v4 $KUBERNETES_PROVIDER_SDK_VERSION standing in, Go module proxy" >"$out/PROVENANCE"
}

build_docker_provider() {
  local archive
  archive=$(vendored_source "$DOCKER_PROVIDER_ARCHIVE" "$DOCKER_PROVIDER_SHA256")
  cd "$work/src/pulumi-docker-v$DOCKER_PROVIDER_VERSION/provider"
  go mod edit -require "github.com/pulumi/pulumi-terraform-bridge/v3@$DOCKER_PROVIDER_BRIDGE_VERSION"
  # main.go embeds schema-embed.json, which upstream's Makefile generates from schema.json.
  (cd cmd/pulumi-resource-docker && VERSION="$DOCKER_PROVIDER_VERSION" go generate main.go)
  go build -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi-docker/provider/v4/pkg/version.Version=$DOCKER_PROVIDER_VERSION" \
    -o "$out/bin/pulumi-resource-docker" ./cmd/pulumi-resource-docker
  echo "pulumi-resource-docker: $archive (sha256 $DOCKER_PROVIDER_SHA256), pulumi-docker v$DOCKER_PROVIDER_VERSION with its upstream terraform-provider-docker; pulumi-terraform-bridge/v3 $DOCKER_PROVIDER_BRIDGE_VERSION instead of the required v3.125.0, which the Go module proxy refuses" >"$out/PROVENANCE"
}

# The wrapper module of k8s.io/kubernetes in $work/mod (each staging module, replaced by
# ./staging/src/k8s.io/<name> upstream, by its published twin) and the version ldflags its
# binaries are built with, in $kubernetes_ldflags.
kubernetes_module() {
  local source replacements=() staging
  source=$(module_dir "k8s.io/kubernetes@v$KUBERNETES_VERSION")
  while read -r staging; do
    replacements+=("$staging=$staging@v0.${KUBERNETES_VERSION#1.}")
  done < <(sed -n 's#^\t\(k8s.io/[a-z-]*\) => ./staging/src/.*#\1#p' "$source/go.mod")
  wrapper_module "$work/mod" k8s.io/kubernetes "v$KUBERNETES_VERSION" "${replacements[@]}"
  local minor=${KUBERNETES_VERSION#1.}
  minor=${minor%%.*}
  local pkg
  kubernetes_ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    kubernetes_ldflags+=" -X $pkg.gitVersion=v$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    kubernetes_ldflags+=" -X $pkg.gitTreeState=clean"
  done
}

# The API server, controller manager, scheduler and kubelet in one `go build`: the packages they
# share compile once and the four links overlap.
build_kubernetes() {
  kubernetes_module
  cd "$work/mod"
  local component packages=()
  for component in $KUBERNETES_BINARIES; do packages+=("k8s.io/kubernetes/cmd/$component"); done
  go build -trimpath -ldflags "$kubernetes_ldflags" -o "$out/bin/" "${packages[@]}"
  for component in $KUBERNETES_BINARIES; do
    echo "$component: k8s.io/kubernetes@v$KUBERNETES_VERSION cmd/$component, staging modules at their published v0.${KUBERNETES_VERSION#1.}, Go module proxy" >>"$out/PROVENANCE"
  done
}

# The etcd server (its main package, go.etcd.io/etcd/server/v3), through a wrapper module whose
# replaces stand the published sibling modules of the same version in for upstream's ../api etc.
build_etcd() {
  local module
  local replacements=()
  for module in api/v3 client/pkg/v3 client/v3 pkg/v3; do
    replacements+=("go.etcd.io/etcd/$module=go.etcd.io/etcd/$module@v$ETCD_VERSION")
  done
  wrapper_module "$work/mod" go.etcd.io/etcd/server/v3 "v$ETCD_VERSION" "${replacements[@]}"
  cd "$work/mod"
  go build -trimpath -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=v$ETCD_VERSION" \
    -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
  echo "etcd: go.etcd.io/etcd/server/v3@v$ETCD_VERSION (the etcd server), its sibling modules at the same version, Go module proxy" >"$out/PROVENANCE"
}

build_training_operator() {
  local module=github.com/kubeflow/training-operator
  GOBIN="$out/bin" go install -trimpath -ldflags "-s -w" \
    "$module/cmd/training-operator.v1@v$TRAINING_OPERATOR_VERSION"
  mv "$out/bin/training-operator.v1" "$out/bin/training-operator"
  mkdir -p "$out/share/crds"
  cp "$(module_dir "$module@v$TRAINING_OPERATOR_VERSION")/manifests/base/crds/kubeflow.org_pytorchjobs.yaml" \
    "$out/share/crds/"
  echo "training-operator: $module@v$TRAINING_OPERATOR_VERSION cmd/training-operator.v1 and its PyTorchJob CRD, Go module proxy" >"$out/PROVENANCE"
}

build_kwok() {
  GOBIN="$out/bin" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
  # kwok plays no stage unless configured: the "fast" node and pod stages kwokctl uses, but for
  # pod-complete, which ends every pod a Job owns (a TrainJob's, through JobSet) a few seconds
  # after it runs: a test could not look at a running TrainJob without racing it. Here every pod
  # ends only as a test says (the project's pod-exit stage, tests/support/kwok/).
  local source
  source=$(module_dir "sigs.k8s.io/kwok@v$KWOK_VERSION")
  mkdir -p "$out/share/kwok-stages"
  cp "$source"/kustomize/stage/node/fast/node-initialize.yaml \
    "$source"/kustomize/stage/pod/fast/pod-{ready,delete}.yaml "$out/share/kwok-stages/"
  echo "kwok: sigs.k8s.io/kwok@v$KWOK_VERSION cmd/kwok and its fast node-initialize, pod-ready and pod-delete stages, Go module proxy" >"$out/PROVENANCE"
}

# CoreDNS's own main with only the plugins the real node's Corefile uses (tests/support/real_node.py), in
# their upstream order: the kubernetes plugin and client-go are most of it, and the rest of the
# default build (cloud DNS backends and their SDKs) would triple the build for nothing.
build_coredns() {
  mkdir -p "$work/mod" && cd "$work/mod"
  go mod init e2e-tools.local/coredns >/dev/null 2>&1
  go mod edit -require "github.com/coredns/coredns@v$COREDNS_VERSION"
  cat >main.go <<'GO'
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func init() {
	dnsserver.Directives = []string{"bind", "ready", "health", "errors", "log", "kubernetes"}
}

func main() { coremain.Run() }
GO
  go build -trimpath -ldflags "-s -w" -o "$out/bin/coredns" .
  echo "coredns: github.com/coredns/coredns@v$COREDNS_VERSION coremain with the bind, ready, health, errors, log and kubernetes plugins, Go module proxy" >"$out/PROVENANCE"
}

# The NetworkPolicy agent (cluster/real_node.py runs it in the node's network namespace): upstream's
# main package, cmd/ (its Makefile's `go build cmd/main.go`), named as upstream names the binary.
build_kube_network_policies() {
  local module=sigs.k8s.io/kube-network-policies
  wrapper_module "$work/mod" "$module" "v$KUBE_NETWORK_POLICIES_VERSION"
  cd "$work/mod"
  go build -trimpath -ldflags "-s -w" -o "$out/bin/kube-network-policies" "$module/cmd"
  echo "kube-network-policies: $module@v$KUBE_NETWORK_POLICIES_VERSION cmd (the agent's main package), Go module proxy" >"$out/PROVENANCE"
}

# The sandbox image every pod's network namespace is held by: a static Go binary that waits for
# SIGINT or SIGTERM and reaps the children it inherits as PID 1.
build_pause() {
  mkdir -p "$work/mod" "$work/root"
  cd "$work/mod"
  go mod init e2e-tools.local/pause >/dev/null 2>&1
  cat >main.go <<'GO'
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			if pid, _ := syscall.Wait4(-1, nil, syscall.WNOHANG, nil); pid <= 0 {
				break
			}
		}
	}
}
GO
  go build -trimpath -ldflags "-s -w" -o "$work/root/pause" .
  oci_archive "localhost/pytorch-distributed-pause:$PAUSE_IMAGE_VERSION" '["/pause"]' "$out/share/pause"
  echo "pause image $(cat "$out/share/pause/ref"): a static binary ($(go version | cut -d' ' -f3)) in an OCI archive made here" >"$out/PROVENANCE"
}

# The image of the init container the training operator adds to every worker pod, which runs
# `sh -c 'for i in $(seq N); do if nslookup MASTER; then ...; sleep 2; done'` until the
# master's name resolves: upstream's default, alpine:3.10, is on Docker Hub, which cannot be
# reached. sh, seq, sleep and echo are Debian's busybox with the libraries it links from
# Debian's libc6 (both unpacked, not installed). busybox's own nslookup fails whenever any of
# the pod's search domains answers NXDOMAIN, even with the name found through another, so
# `nslookup` on PATH is a static Go program that succeeds once the name resolves through the
# pod's resolv.conf (search domains and ndots included). (The static busybox-static would run
# its own nslookup applet whatever PATH holds.)
build_init_image() {
  mkdir -p "$work/deb" "$work/root/bin" "$work/root/lib/x86_64-linux-gnu" "$work/root/lib64" "$work/mod"
  # Package lists: install_debian_packages updated them before any build started.
  (cd "$work" && apt-get download busybox libc6 >/dev/null)
  local deb applet library
  for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/deb"; done
  cp "$work/deb/bin/busybox" "$work/root/bin/busybox"
  for applet in sh seq sleep echo; do ln -s busybox "$work/root/bin/$applet"; done
  for library in libc.so.6 libresolv.so.2; do
    cp -L "$work/deb/lib/x86_64-linux-gnu/$library" "$work/root/lib/x86_64-linux-gnu/"
  done
  cp -L "$work/deb/lib64/ld-linux-x86-64.so.2" "$work/root/lib64/"
  cd "$work/mod"
  go mod init e2e-tools.local/nslookup >/dev/null 2>&1
  cat >main.go <<'GO'
package main

import (
	"fmt"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: nslookup NAME")
		os.Exit(2)
	}
	addresses, err := net.LookupHost(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("Name:\t%s\n", os.Args[1])
	for _, address := range addresses {
		fmt.Printf("Address: %s\n", address)
	}
}
GO
  go build -trimpath -ldflags "-s -w" -o "$work/root/bin/nslookup" .
  oci_archive "localhost/pytorch-distributed-init:$INIT_IMAGE_VERSION" '["/bin/sh"]' "$out/share/init-image"
  echo "init container image $(cat "$out/share/init-image/ref"): $(cd "$work" && echo *.deb) from Debian (bin/busybox as sh, seq, sleep, echo; libc, libresolv, the loader) and a static Go nslookup ($(go version | cut -d' ' -f3)), in an OCI archive made here" >"$out/PROVENANCE"
}

# $work/root as a one-layer image REF with ENTRYPOINT (a JSON list), an OCI archive for `ctr
# images import` in DIR/image.tar and its reference in DIR/ref. Reproducible: fixed owner and
# times, no gzip name or timestamp.
oci_archive() {
  local ref=$1 entrypoint=$2 dir=$3 layout=$work/oci
  mkdir -p "$layout/blobs/sha256" "$dir"
  tar --create --owner=0 --group=0 --numeric-owner --mtime=@0 --sort=name \
    -C "$work/root" -f "$work/layer.tar" .
  gzip -n -9 <"$work/layer.tar" >"$work/layer.tar.gz"
  local diff_id layer config manifest
  diff_id=$(sha256sum <"$work/layer.tar" | cut -d' ' -f1)
  layer=$(blob "$work/layer.tar.gz")
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
    "$entrypoint" "$diff_id" >"$work/config.json"
  config=$(blob "$work/config.json")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json",%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip",%s}]}' \
    "$config" "$layer" >"$work/manifest.json"
  manifest=$(blob "$work/manifest.json")
  printf '{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",%s,"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$ref" "${ref##*:}" >"$layout/index.json"
  echo '{"imageLayoutVersion":"1.0.0"}' >"$layout/oci-layout"
  tar --create --owner=0 --group=0 --numeric-owner --mtime=@0 -C "$layout" \
    -f "$dir/image.tar" oci-layout index.json blobs
  echo "$ref" >"$dir/ref"
}

# Copies $1 into the OCI layout's blobs and prints its descriptor's "digest" and "size" fields.
blob() {
  local digest size
  digest=$(sha256sum <"$1" | cut -d' ' -f1)
  size=$(stat -c %s "$1")
  cp "$1" "$work/oci/blobs/sha256/$digest"
  printf '"digest":"sha256:%s","size":%s' "$digest" "$size"
}

# The job controllers, in one module graph: Trainer v2's controller manager, the JobSet controller
# it runs a TrainJob's nodes on, and Kueue's controller manager, with their CRDs and webhook
# configurations and Trainer's torch-distributed ClusterTrainingRuntime. One graph because Kueue
# compiles in the Trainer API it admits and resumes: built on its own (its go.mod asks Trainer
# v2.2.0) it resumes a TrainJob with v2.2.0's types, and JobSet's webhook refuses Trainer v2.3.0's
# update of the suspended JobSet ("field is immutable") every time; here it gets the Trainer API
# the plane runs. Minimal version selection lifts all three to Trainer's Kubernetes libraries
# (k8s.io v0.36, controller-runtime v0.24), and they share one compile of them: the three build in
# about 200 s of wall time on 2 cores, Kueue on its own took 490.
build_job_controllers() {
  local trainer=github.com/kubeflow/trainer/v2 jobset=sigs.k8s.io/jobset kueue=sigs.k8s.io/kueue
  # A wrapper module requiring the exact versions: `go install module@version` reads the version
  # list (for deprecations), which the proxy refuses for JobSet and which omits Kueue v0.17.0.
  wrapper_module "$work/mod" "$trainer" "v$TRAINER_VERSION"
  (
    cd "$work/mod"
    # k8s.io/apiserver v0.36's storage factory, which Kueue imports, needs this module; the graph
    # (pruned at Trainer's go.mod, which does not import that package) would otherwise look up
    # its latest version at build time.
    go mod edit -require "$jobset@v$JOBSET_VERSION" -require "$kueue@v$KUEUE_VERSION" \
      -require github.com/grpc-ecosystem/go-grpc-middleware/providers/prometheus@v1.1.0
    go build -trimpath -ldflags "-s -w" -o "$out/bin/" \
      "$trainer/cmd/trainer-controller-manager" "$jobset" "$kueue/cmd/kueue"
  )
  local source
  source=$(module_dir "$trainer@v$TRAINER_VERSION")
  mkdir -p "$out/share/trainer-crds" "$out/share/trainer-runtimes" "$out/share/trainer-webhooks"
  cp "$source"/manifests/base/crds/trainer.kubeflow.org_*.yaml "$out/share/trainer-crds/"
  cp "$source/manifests/base/runtimes/torch_distributed.yaml" "$out/share/trainer-runtimes/"
  cp "$source/manifests/base/webhook/manifests.yaml" "$out/share/trainer-webhooks/"
  source=$(module_dir "$jobset@v$JOBSET_VERSION")
  mkdir -p "$out/share/jobset-crds" "$out/share/jobset-webhooks"
  cp "$source"/config/components/crd/bases/*.yaml "$out/share/jobset-crds/"
  # The webhook configurations with the pod webhooks' objectSelector (JobSet's pods only), which
  # its kustomization adds as patches.
  cp "$source/config/components/webhook/manifests.yaml" "$out/share/jobset-webhooks/"
  cp "$source"/config/components/webhook/patches/*.yaml "$out/share/jobset-webhooks/"
  source=$(module_dir "$kueue@v$KUEUE_VERSION")
  mkdir -p "$out/share/kueue-crds" "$out/share/kueue-webhooks"
  cp "$source"/config/components/crd/bases/*.yaml "$out/share/kueue-crds/"
  cp "$source/config/components/webhook/manifests.yaml" "$out/share/kueue-webhooks/"
  {
    echo "trainer-controller-manager: $trainer@v$TRAINER_VERSION cmd/trainer-controller-manager, its CRDs (manifests/base/crds), webhook configurations (manifests/base/webhook) and the torch-distributed ClusterTrainingRuntime (manifests/base/runtimes), Go module proxy"
    echo "jobset: $jobset@v$JOBSET_VERSION (its root main package), its CRD (config/components/crd/bases) and webhook configurations (config/components/webhook), Go module proxy"
    echo "kueue: $kueue@v$KUEUE_VERSION cmd/kueue, its CRDs (config/components/crd/bases) and webhook configurations (config/components/webhook), Go module proxy"
    echo "the three built in one module graph: $(cd "$work/mod" && go list -m k8s.io/api sigs.k8s.io/controller-runtime | paste -sd ' ')"
  } >"$out/PROVENANCE"
}

# Debian's containerd (1.6, with its runc v2 shim and ctr), runc and CNI plugins,
# installed before the builds start (the package lists too, which build_init_image reads), while
# the Go compiler has the CPU. Only linked afterwards: the control plane and the real node
# (tests/support/) run them with configs and state of their own, never the packaged services.
install_debian_packages() {
  local command missing=()
  for command in containerd containerd-shim-runc-v2 ctr runc; do
    command -v "$command" >/dev/null || missing+=("$command")
  done
  [[ -x /usr/lib/cni/bridge ]] || missing+=(cni)
  if [[ ${#missing[@]} -eq 0 ]]; then
    apt-cache show busybox >/dev/null 2>&1 && return 0
  elif [[ $(id -u) -ne 0 ]]; then
    say "missing ${missing[*]}: run 'sudo apt-get install containerd runc containernetworking-plugins'"
    exit 1
  fi
  say "installing Debian's containerd, runc and containernetworking-plugins (apt-get)"
  "$repo/scripts/apt-get.sh" update -qq >&2
  [[ ${#missing[@]} -eq 0 ]] && return 0
  DEBIAN_FRONTEND=noninteractive "$repo/scripts/apt-get.sh" install -y -qq --no-install-recommends \
    containerd runc containernetworking-plugins >&2
  # Debian starts the packaged services where systemd runs; the fixtures run their own.
  systemctl disable --now containerd >/dev/null 2>&1 || true
}

link_debian_packages() {
  local binary
  for binary in containerd containerd-shim-runc-v2 ctr runc; do
    ln -sfn "$(command -v "$binary")" "$bin/$binary"
  done
  ln -sfn /usr/lib/cni "$set_dir/cni"
}

# The key of a tool's directory: a hash of its build function, of every function it calls (to the
# end of the chain) and of the values of the upper-case variables they read (PD_* overrides say
# where things are, not what is built). Nothing else: an unrelated change rebuilds nothing.
recipe_key() {
  local text seen=" $1 " grew=1 name variable
  text=$(declare -f "$1")
  while ((grew)); do
    grew=0
    for name in $(compgen -A function); do
      [[ $seen == *" $name "* ]] && continue
      if grep -qw -- "$name" <<<"$text"; then
        text+=$'\n'$(declare -f "$name")
        seen+="$name "
        grew=1
      fi
    done
  done
  for variable in $(grep -oE '[$][{]?[A-Z][A-Z0-9_]*' <<<"$text" | tr -d '{' | cut -c2- | sort -u); do
    [[ $variable == PD_* ]] || text+=$'\n'"$variable=${!variable-}"
  done
  sha256sum <<<"$text" | cut -c1-12
}

KUBERNETES_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet"
# One entry per tool: name, binaries, what to print, build function, and the tool whose compiled
# packages it reuses (it starts once that one is done). Longest builds first.
TOOLS=(
  "pulumi-$PULUMI_VERSION|pulumi|pulumi CLI v$PULUMI_VERSION|build_pulumi|"
  "pulumi-resource-kubernetes-$KUBERNETES_PROVIDER_VERSION|pulumi-resource-kubernetes|kubernetes provider v$KUBERNETES_PROVIDER_VERSION|build_kubernetes_provider|"
  "kubernetes-$KUBERNETES_VERSION|$KUBERNETES_BINARIES|${KUBERNETES_BINARIES// /, } v$KUBERNETES_VERSION|build_kubernetes|"
  "job-controllers-$TRAINER_VERSION-$JOBSET_VERSION-$KUEUE_VERSION|trainer-controller-manager jobset kueue|Trainer v$TRAINER_VERSION, JobSet v$JOBSET_VERSION and Kueue v$KUEUE_VERSION controllers|build_job_controllers|"
  "pulumi-resource-docker-$DOCKER_PROVIDER_VERSION|pulumi-resource-docker|docker provider v$DOCKER_PROVIDER_VERSION|build_docker_provider|"
  "coredns-$COREDNS_VERSION|coredns|CoreDNS v$COREDNS_VERSION (kubernetes plugin)|build_coredns|"
  "kube-network-policies-$KUBE_NETWORK_POLICIES_VERSION|kube-network-policies|kube-network-policies v$KUBE_NETWORK_POLICIES_VERSION (NetworkPolicy agent)|build_kube_network_policies|"
  "kwok-$KWOK_VERSION|kwok|kwok v$KWOK_VERSION|build_kwok|"
  "etcd-$ETCD_VERSION|etcd|etcd v$ETCD_VERSION|build_etcd|kubernetes-$KUBERNETES_VERSION"
  "training-operator-$TRAINING_OPERATOR_VERSION|training-operator|training-operator v$TRAINING_OPERATOR_VERSION|build_training_operator|"
  "pulumi-language-python|pulumi-language-python pulumi-language-python-exec|Python language host (pulumi $PULUMI_VERSION)|build_language_python|pulumi-$PULUMI_VERSION"
  "pulumi-language-yaml-$PULUMI_YAML_VERSION|pulumi-language-yaml|YAML language host v$PULUMI_YAML_VERSION|build_language_yaml|pulumi-$PULUMI_VERSION"
  "pause-image-$PAUSE_IMAGE_VERSION||sandbox (pause) image, a static Go binary|build_pause|"
  "init-image-$INIT_IMAGE_VERSION||the operator's init container image, Debian's busybox|build_init_image|"
)
print_only=0
case ${1:-} in
  --print) print_only=1 ;;
  "") ;;
  *)
    say "unknown argument '$1': expected --print or nothing"
    exit 2
    ;;
esac

declare -A tool_dir tool_what tool_binaries tool_build tool_after
order=()
for entry in "${TOOLS[@]}"; do
  IFS='|' read -r name binaries what build after <<<"$entry"
  order+=("$name")
  tool_dir[$name]=$tools/$name-$(recipe_key "$build")
  tool_what[$name]=$what
  tool_binaries[$name]=$binaries
  tool_build[$name]=$build
  tool_after[$name]=$after
done
# The set of tools this script assembles, and where its bin directory lives.
set_key=$(for name in "${order[@]}"; do echo "${tool_dir[$name]##*/}|${tool_binaries[$name]}"; done |
  sha256sum | cut -c1-16)
set_dir=$cache/sets/$set_key
bin=$set_dir/bin

if ((print_only)); then
  echo "$bin"
  exit 0
fi

jobs=${PD_E2E_BUILD_JOBS:-2}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || {
  say "PD_E2E_BUILD_JOBS must be a whole number of builds at once (1 or more), not '$jobs'"
  exit 2
}
mkdir -p "$tools" "$cache/sets"
# -dwarf=false: every binary is linked with -s -w (no symbol table, no DWARF), so the compiler's
# DWARF is thrown away; not making it saves about an eighth of the compile time (etcd: 88 -> 77
# CPU seconds). Outside the recipe keys on purpose: the binaries are the same program, and a
# warm cache stays warm.
export GOFLAGS="-mod=mod -gcflags=all=-dwarf=false" GOTOOLCHAIN=local CGO_ENABLED=0
# The compiler and linker are Go programs: collecting their garbage an eighth as often saves about
# a fifth of their CPU (etcd: 79 -> 63 user seconds; 240 -> 400 MB at the peak), and the soft
# limit brings the collector back before a large package's compile (the API types) takes the
# memory that make test and the base image build beside it need. The output does not change.
export GOGC=800 GOMEMLIMIT=2GiB

# Two builds at once (two checkouts, a suite and a user) would race on the same directories.
exec 9>"$cache/.lock"
if ! flock --nonblock 9; then
  say "another e2e-tools build holds $cache/.lock; waiting for it"
  flock 9
fi

record() {
  [[ -z ${PD_TIMINGS_FILE:-} ]] || printf 'e2e tool %s\t%s\t%s\n' "$1" "$2" "$3" >>"$PD_TIMINGS_FILE"
}

# One tool's build, in a background subshell of its own: scratch space, the build function with
# its output in the tool's log, then the result moved into place whole (an interrupted build leaves
# no tool). The function is called bare, not as `fn || exit`: bash ignores `set -e` in anything
# run as the left side of `||`, so a failed step (a vendored archive not found) went on to the
# next and the tool was cached as built, without its binary. A binary the entry names and the
# build did not make fails it too.
build_tool() {
  local name=$1 dir=${tool_dir[$1]} binary
  work=$(mktemp -d "$tools/.work-$name.XXXXXX")
  out=$work/out
  mkdir -p "$out/bin"
  exec >"$dir.log" 2>&1
  "${tool_build[$name]}"
  for binary in ${tool_binaries[$name]}; do
    [[ -x $out/bin/$binary ]] || {
      echo "the build made no bin/$binary"
      exit 1
    }
  done
  rm -rf "$dir" && mv "$out" "$dir" && rm -rf "$work"
}

install_debian_packages
declare -A running=() started_at=() finished=()
pending=()
for name in "${order[@]}"; do
  if [[ -f ${tool_dir[$name]}/PROVENANCE ]]; then
    finished[$name]=1
    say "${tool_what[$name]}: cached"
    record "$name" 0 cached
  else
    pending+=("$name")
  fi
done
# However this script ends, no build of its own goes on (each runs in a process group of its own).
stop_builds() {
  local pid
  for pid in "${running[@]}"; do kill -- -"$pid" 2>/dev/null || true; done
}
trap stop_builds EXIT
last_progress=$SECONDS
while ((${#pending[@]} + ${#running[@]})); do
  for name in "${!running[@]}"; do
    kill -0 "${running[$name]}" 2>/dev/null && continue
    if ! wait "${running[$name]}"; then
      unset "running[$name]"
      say "FAILED: ${tool_what[$name]}; last lines of ${tool_dir[$name]}.log:"
      tail -n 40 "${tool_dir[$name]}.log" >&2
      exit 1
    fi
    unset "running[$name]"
    finished[$name]=1
    seconds=$((SECONDS - started_at[$name]))
    say "${tool_what[$name]}: built in ${seconds}s"
    record "$name" "$seconds" built
  done
  waiting=()
  for name in ${pending[@]+"${pending[@]}"}; do
    after=${tool_after[$name]}
    if ((${#running[@]} < jobs)) && [[ -z $after || -n ${finished[$after]:-} ]]; then
      say "${tool_what[$name]}: building (log: ${tool_dir[$name]}.log)"
      started_at[$name]=$SECONDS
      set -m
      build_tool "$name" &
      running[$name]=$!
      set +m
    else
      waiting+=("$name")
    fi
  done
  pending=(${waiting[@]+"${waiting[@]}"})
  if ((SECONDS - last_progress >= 60 && ${#running[@]})); then
    say "  ... still building: ${!running[*]}"
    last_progress=$SECONDS
  fi
  ((${#pending[@]} + ${#running[@]})) && sleep 1
done
trap - EXIT

# The set: a bin directory with every tool's binaries, and their data beside it. The CLI and its
# language host are hard links side by side, as in Pulumi's release archive, so the CLI finds the
# host next to itself; the providers go to providers/, off PATH, for `pulumi plugin install
# --file` (the CLI warns about any plugin it finds on PATH instead).
mkdir -p "$bin" "$set_dir/providers"
for name in "${order[@]}"; do
  dir=${tool_dir[$name]}
  sed 's/^/    /' "$dir/PROVENANCE" >&2
  for binary in ${tool_binaries[$name]}; do
    [[ -x $dir/bin/$binary ]] || { say "FAILED: $dir/bin/$binary is missing"; exit 1; }
  done
  for path in "$dir"/bin/*; do
    [[ -e $path ]] || continue # a tool of data only (share/)
    binary=$(basename "$path")
    target=$bin/$binary
    [[ $binary == pulumi-resource-* ]] && target=$set_dir/providers/$binary
    ln -f "$path" "$target" 2>/dev/null || cp -f "$path" "$target"
  done
  if [[ -d $dir/share ]]; then
    for path in "$dir"/share/*; do ln -sfn "$path" "$set_dir/$(basename "$path")"; done
  fi
done
link_debian_packages
say "tools ready in $bin"
echo "$bin"
