"""What the e2e modules read of one namespace: objects as plain dicts (as the API server returns
them, or as the client serializes them), None for one that is not there. Each module adds the
few readers of its own job API on top."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Cluster


class NamespaceObjects:
    def __init__(self, cluster: Cluster, namespace: str) -> None:
        from kubernetes import client

        self.api = cluster.api()
        self.namespace = namespace
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)

    def custom_object(self, group: str, version: str, plural: str, name: str) -> Any | None:
        from kubernetes.client import ApiException

        try:
            return self.custom.get_namespaced_custom_object(
                group, version, self.namespace, plural, name
            )
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def custom_objects(self, group: str, version: str, plural: str) -> list[Any]:
        listed = self.custom.list_namespaced_custom_object(group, version, self.namespace, plural)
        return list(listed["items"])

    def get(self, kind: str, name: str) -> Any | None:
        """A core object by its kind in the client's words (`persistent_volume_claim`)."""
        from kubernetes.client import ApiException

        reader = getattr(self.core, f"read_namespaced_{kind}")
        try:
            return self.api.sanitize_for_serialization(reader(name, self.namespace))
        except ApiException as error:
            if error.status == 404:
                return None
            raise

    def pods_matching(self, selector: str) -> list[Any]:
        listed = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        return [self.api.sanitize_for_serialization(pod) for pod in listed.items]
