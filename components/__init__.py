"""Pulumi components of the training environment, plus the pure settings and manifest builders.

`settings` and `manifests` import no Pulumi runtime state, so the offline renderer, the local
runner and the policy tests reuse them; each ComponentResource lives in its own module.
"""
