"""Pulumi components of the training environment and their hooks, one ComponentResource per
module. They build on the settings (`settings/`), the pure builders (`builders/`) and the
cluster readers (`readers/`), which import no Pulumi runtime state, so the offline renderer, the
local runner and the policy tests reuse those without the components.
"""
