"""Run tools.supervisor on a JSON job description, the way tools.run_local drives it.

Usage: run_supervisor.py SPEC.json. Prints `OUTCOME <json>` last and exits with the job's code.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tools.supervisor import JobPolicy, ReplicaCommand, Supervisor


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    replicas = [
        ReplicaCommand(
            name=r["name"],
            argv=r["argv"],
            env=r["env"],
            cwd=Path(r["cwd"]),
            restart_policy=r.get("restart_policy", "OnFailure"),
        )
        for r in spec["replicas"]
    ]
    supervisor = Supervisor(
        replicas,
        JobPolicy(**spec["policy"]),
        pid_dir=Path(spec["pid_dir"]) if spec.get("pid_dir") else None,
    )
    outcome = supervisor.run()
    print("OUTCOME " + json.dumps(outcome.__dict__), flush=True)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
