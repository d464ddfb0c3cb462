"""The one-machine cluster: a control plane, a real node, an authenticated registry and podman's
Docker API on this machine (`make cluster`; tools/cluster/service.py), from the binaries
scripts/e2e-tools.sh builds. The real-engine e2e suite starts its control plane and real node
from the same modules (tests/e2e/conftest.py), with kwok's fake nodes beside them."""
