"""The one-machine cluster: a real Kubernetes control plane (etcd, the API server, controller
manager and scheduler, the training operator; cluster/control_plane.py) running Kubeflow Trainer
with JobSet, Kueue and a real node (kubelet, containerd, CoreDNS, a NetworkPolicy agent) as
components (cluster/plane_component.py), an authenticated registry and podman's Docker API, all
on this machine, from the binaries scripts/e2e-tools.sh builds. Users start it in the background
with `make cluster` (`python -m cluster up`; cluster/service.py); the real-engine e2e suite starts
its control plane and real node from the same modules (tests/e2e/conftest.py), with kwok's fake
nodes beside them. It builds on the components' constants and `machine/`, and imports nothing of
the user commands in tools/."""
