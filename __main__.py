"""Pulumi program: read and validate the stack's settings, then declare the training environment.

Everything lives in components/; this file only wires settings to the top component (after
making an interruption quiet: components/interruption.py) and exports what a user needs next
(`StackOutputs`: where the job runs, what it runs, where checkpoints go, how to watch it).
"""

from __future__ import annotations

import pulumi

from components.interruption import stop_quietly_on_sigint
from components.settings import load_settings
from components.training_environment import TrainingEnvironment

stop_quietly_on_sigint()
settings = load_settings()
environment = TrainingEnvironment("training", settings)

for output_name, value in environment.outputs.by_name().items():
    pulumi.export(output_name, value)
