"""Test infrastructure, not part of what a user runs: the e2e control plane
(`python -m tests.support.control_plane --workdir DIR`), its real node, the node's network
namespaces and egress proxy, Kubeflow Trainer v2 on the plane, kwok's stages, and the local
registry script the image tests and the real node push to."""
