#!/usr/bin/env bash
# A laptop cluster for `make up STACK=dev`: kind, a local registry on localhost:5001 (the dev
# stack's image.repository) and the Kubeflow training operator. Needs Docker, kind, kubectl and
# network access (CI has none of these; nothing in `make test` runs this script).
#
# Usage: scripts/kind-up.sh   (env: CLUSTER=pytorch-distributed, OPERATOR_REF=v1.9.4)
set -euo pipefail

cluster=${CLUSTER:-pytorch-distributed}
operator_ref=${OPERATOR_REF:-v1.9.4}
registry=kind-registry
registry_port=5001

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null 2>&1 || {
    echo "kind-up.sh: '$tool' is required" >&2
    exit 1
  }
done

# 1. The registry, reachable as localhost:5001 from this machine (where Docker pushes).
if [[ $(docker inspect -f '{{.State.Running}}' "$registry" 2>/dev/null || true) != true ]]; then
  docker run -d --restart=always -p "127.0.0.1:${registry_port}:5000" --network bridge \
    --name "$registry" registry:2
fi

# 2. The cluster, with containerd told where to find registry hosts.
if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --name "$cluster" --config - <<YAML
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
containerdConfigPatches:
  - |-
    [plugins."io.containerd.grpc.v1.cri".registry]
      config_path = "/etc/containerd/certs.d"
YAML
fi

# 3. Inside the nodes, localhost:5001 means the registry container on the kind network.
for node in $(kind get nodes --name "$cluster"); do
  docker exec "$node" mkdir -p "/etc/containerd/certs.d/localhost:${registry_port}"
  printf '[host."http://%s:5000"]\n' "$registry" |
    docker exec -i "$node" cp /dev/stdin "/etc/containerd/certs.d/localhost:${registry_port}/hosts.toml"
done
if [[ $(docker inspect -f '{{json .NetworkSettings.Networks.kind}}' "$registry") == null ]]; then
  docker network connect kind "$registry"
fi
kubectl --context "kind-$cluster" apply -f - <<YAML
apiVersion: v1
kind: ConfigMap
metadata:
  name: local-registry-hosting
  namespace: kube-public
data:
  localRegistryHosting.v1: |
    host: "localhost:${registry_port}"
YAML

# 4. The training operator (PyTorchJob CRD and controller), then wait until it serves.
kubectl --context "kind-$cluster" apply --server-side \
  -k "github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=${operator_ref}"
kubectl --context "kind-$cluster" -n kubeflow rollout status deployment/training-operator \
  --timeout=300s

echo "kind-up.sh: cluster kind-$cluster is ready (kubectl context kind-$cluster)."
echo "Next: export PULUMI_CONFIG_PASSPHRASE=...; make up STACK=dev"
