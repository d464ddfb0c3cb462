"""Entry point Pulumi runs for `--policy-pack policy`: it only wires the validators into a pack.

Pulumi executes this file with policy/ on sys.path, so the validators import as `rules`.
PolicyPack(...) starts the analyzer's gRPC server and blocks, which is why nothing else lives here.
"""

from __future__ import annotations

from pulumi_policy import PolicyPack
from rules.pack import PACK_NAME, build_policies

PolicyPack(name=PACK_NAME, policies=build_policies())
