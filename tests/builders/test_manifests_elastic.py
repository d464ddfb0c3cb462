"""builders/manifests.py for elastic jobs (`job.elastic`) and step checkpoints
(`job.saveEverySteps`): the entrypoint's arguments and the settings refused. The elastic
PyTorchJob itself (what the operator's webhook admits, the gang's minimum on Run:ai) is
tests/builders/job_apis/test_pytorchjob.py's."""

from __future__ import annotations

import re
from typing import Any

import pytest

from builders.manifests import trainer_args
from settings.stack import SettingsError
from tests.builders.stack_settings import elastic, elastic_settings


def test_the_entrypoint_gets_torchruns_restarts_and_the_global_batch_of_all_pods() -> None:
    args = trainer_args(elastic(maxRestarts=5))
    assert args[:3] == ["--max-restarts", "5", "--"]
    # 16 per process x 2 processes x 3 pods, whatever number of pods the first rendezvous finds.
    assert args[args.index("--global-batch-size") + 1] == "96"
    assert "--global-batch-size" not in trainer_args(elastic_settings())


def test_step_checkpoints_reach_the_trainer() -> None:
    args = trainer_args(elastic_settings(saveEverySteps=200))
    assert args[args.index("--save-every-steps") + 1] == "200"
    assert "--save-every-steps" not in trainer_args(elastic_settings())


@pytest.mark.parametrize(
    ("job", "message"),
    [
        (
            {"elastic": {"minNodes": 4}},
            "job.elastic.minNodes = 4: at most job.nodes (3), the pods the job has",
        ),
        (
            {"elastic": {"minNodes": 1, "maxNodes": 5}},
            "job.elastic.maxNodes = 5: the job has job.nodes = 3 pods, the most it can train on",
        ),
        (
            {"elastic": {"minNodes": 1}, "maxRestarts": 2},
            "job.maxRestarts = 2: with job.elastic, torchrun's restarts are "
            "job.elastic.maxRestarts",
        ),
        ({"elastic": {}}, "missing config pytorch-distributed:job.elastic.minNodes: required"),
    ],
)
def test_an_elastic_setting_that_cannot_work_is_one_line_naming_the_key(
    job: dict[str, Any], message: str
) -> None:
    with pytest.raises(SettingsError, match=re.escape(message)):
        elastic_settings(**job)
