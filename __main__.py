"""Pulumi program: read and validate the stack's settings, then declare the training environment.

Everything lives in components/; this file only wires settings to the top component and exports
what a user needs next (where the job runs, what it runs, where checkpoints go, how to watch it).
"""

from __future__ import annotations

import pulumi

from components.settings import load_settings
from components.training_environment import TrainingEnvironment

settings = load_settings()
environment = TrainingEnvironment("training", settings)

pulumi.export("namespace", environment.namespace)
pulumi.export("jobName", environment.job_name)
pulumi.export("image", environment.image_ref)
pulumi.export("claimName", environment.claim_name)
pulumi.export("checkpointPath", environment.checkpoint_path)
pulumi.export("logsCommand", environment.logs_command)
pulumi.export("statusCommand", environment.status_command)
pulumi.export("checkpointCommand", environment.checkpoint_command)
