"""What the project's programs on this machine share, below the tools (tools/) and the one-machine
cluster (cluster/): the port ledger (`ports`), the process table (`procs`), the container engine's
settings (`containers`) and whether an engine's API answers (`engine_api`). Nothing here imports
the rest of the project."""
