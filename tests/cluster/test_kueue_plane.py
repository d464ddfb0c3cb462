"""The configuration and queue objects cluster/kueue_plane.py gives Kueue."""

from __future__ import annotations

from pathlib import Path

from cluster.kueue_plane import (
    FLAVOR,
    INTEGRATIONS,
    cluster_queue,
    kueue_configuration,
    local_queue,
    workload_priority_class,
)
from readers.queue_state import KUEUE_GROUP, KUEUE_VERSION


def test_kueue_admits_a_job_only_when_all_its_pods_can_be_ready(tmp_path: Path) -> None:
    config = kueue_configuration(9443, 8081, tmp_path)
    assert config["waitForPodsReady"]["blockAdmission"] is True
    assert config["integrations"]["frameworks"] == list(INTEGRATIONS)
    assert config["webhook"] == {"port": 9443, "host": "127.0.0.1", "certDir": str(tmp_path)}
    # Only jobs that name a LocalQueue: the suite's other jobs run as without Kueue.
    assert config["manageJobsWithoutQueueName"] is False
    assert config["leaderElection"] == {"leaderElect": False}


def test_the_queue_objects_chain_a_local_queue_to_its_cluster_queues_quota() -> None:
    api_version = f"{KUEUE_GROUP}/{KUEUE_VERSION}"
    queue = cluster_queue("team", {"cpu": "2", "memory": "2Gi"})
    assert queue["apiVersion"] == api_version
    (group,) = queue["spec"]["resourceGroups"]
    assert group["coveredResources"] == ["cpu", "memory"]
    (flavor,) = group["flavors"]
    assert flavor["name"] == FLAVOR
    assert {r["name"]: r["nominalQuota"] for r in flavor["resources"]} == {
        "cpu": "2",
        "memory": "2Gi",
    }
    assert queue["spec"]["preemption"] == {"withinClusterQueue": "LowerPriority"}
    never = cluster_queue("team", {"cpu": "2"}, preempt_lower_priority=False)
    assert never["spec"]["preemption"] == {"withinClusterQueue": "Never"}
    local = local_queue("ml", "team-a", "team")
    assert local["metadata"] == {"name": "team-a", "namespace": "ml"}
    assert local["spec"] == {"clusterQueue": "team", "stopPolicy": "None"}
    held = local_queue("ml", "later", "team", stop_policy="Hold")
    assert held["spec"]["stopPolicy"] == "Hold"
    priority = workload_priority_class("high", 1000)
    assert (priority["kind"], priority["value"]) == ("WorkloadPriorityClass", 1000)
