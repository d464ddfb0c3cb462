"""What the real-engine suite adds to pytest: each module's seconds for .ci/run's timing table.
Its control plane, real node and registry are the one-machine cluster's (cluster/)."""
