"""builders/job_apis/pytorchjob.py's RESTRICTED_INIT_CONTAINER_TEMPLATE, against the training
operator v1.9.4's own init container (pkg/controller.v1/pytorch/initcontainer.go): the same
container once the operator fills its fields in, with what Pod Security "restricted" asks of a
container, so Worker pods with it pass the policy pack's rules."""

from __future__ import annotations

import copy

import yaml

from builders.job_apis.pytorchjob import RESTRICTED_INIT_CONTAINER_TEMPLATE, pytorchjob_manifest
from builders.manifests import container_security_context
from policy.rules import pod_security
from policy.rules.model import PYTORCHJOB_TYPE
from settings.stack import load_stack_file
from tests.conftest import REPO_ROOT

# The operator's built-in template (initContainerTemplate in initcontainer.go, v1.9.4).
BUILT_IN = """
- name: init-pytorch
  image: {{.InitContainerImage}}
  imagePullPolicy: IfNotPresent
  resources:
    limits:
      cpu: 100m
      memory: 20Mi
    requests:
      cpu: 50m
      memory: 10Mi
  command: ['sh', '-c', 'err=1;for i in $(seq {{.MaxTries}}); do if nslookup {{.MasterAddr}}; then err=0 && break; fi;echo waiting for master; sleep 2; done; exit $err']"""  # noqa: E501
FIELDS = {
    "{{.InitContainerImage}}": "alpine:3.10",
    "{{.MaxTries}}": "100",
    "{{.MasterAddr}}": "ddp-dev-master-0",
}


def filled(template: str) -> list[dict]:
    """The template as the operator executes it (Go template fields) and parses it (YAML)."""
    for field, value in FIELDS.items():
        template = template.replace(field, value)
    return yaml.safe_load(template)


def test_the_template_is_the_operators_container_with_restricted_security() -> None:
    (ours,) = filled(RESTRICTED_INIT_CONTAINER_TEMPLATE)
    (theirs,) = filled(BUILT_IN)
    assert ours["securityContext"] == container_security_context()
    assert {k: v for k, v in ours.items() if k not in ("securityContext", "command")} == {
        k: v for k, v in theirs.items() if k != "command"
    }
    # The same shell loop, spaced differently (a folded YAML scalar, to fit the page).
    assert ours["command"][:2] == theirs["command"][:2] == ["sh", "-c"]
    assert ours["command"][2].replace(" ", "") == theirs["command"][2].replace(" ", "")


def test_worker_pods_with_it_meet_restricted_and_with_the_built_in_do_not() -> None:
    job = pytorchjob_manifest(load_stack_file("dev", REPO_ROOT), image="img@sha256:" + "0" * 64)
    rules = (pod_security.no_privilege_escalation, pod_security.drop_capabilities)
    for template, refused in ((RESTRICTED_INIT_CONTAINER_TEMPLATE, False), (BUILT_IN, True)):
        injected = copy.deepcopy(job)
        worker = injected["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        worker["initContainers"] = filled(template)
        messages = [m for rule in rules for m in rule(PYTORCHJOB_TYPE, injected)]
        assert bool(messages) is refused, messages
