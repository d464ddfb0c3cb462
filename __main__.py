"""Pulumi program: read and validate the stack's settings, then declare the training environment.

Everything lives in components/; this file only hands the stack's config to the top component
as its typed arguments (`load_args`; another program writes its own: docs/how-to/
use-the-component.md), after making an interruption quiet (components/interruption.py), and
exports what a user needs next (`StackOutputs`: where the job runs, what it runs, where
checkpoints go, how to watch it).
"""

from __future__ import annotations

import pulumi

from components.interruption import stop_quietly_on_sigint
from components.training_environment import TrainingEnvironment
from settings.stack import load_args

stop_quietly_on_sigint()
environment = TrainingEnvironment("training", load_args())

for output_name, value in environment.outputs.by_name().items():
    pulumi.export(output_name, value)
