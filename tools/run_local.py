"""Run a stack's job (PyTorchJob or TrainJob) on this machine: every pod a local process tree,
trained for real.

    python -m tools.run_local --stack dev [--checkpoint-root DIR] [--epochs N] [--save-every K]
                              [--dataset-size N] [--volume CLAIM=DIR ...]
                              [--backend process|container [--image REF] [--engine podman|docker]
                               [--container-runtime RUNTIME]]

Exit code: 0 the job succeeded; 1 it failed (the summary names the failing replica and its last
error line); 2 it cannot run as asked, found before anything starts (a bad flag or setting, a
checkpoint root that cannot be used, checkpoints of another run in the job's directory); 128 + N
stopped by signal N (130: Ctrl-C), each replica's trainer having committed a checkpoint.

The job comes from the same settings validation and the same builder as the Pulumi program
(`settings.stack.load_stack_file`, the job API's builder in `builders.job_apis`), so what
runs here is what the cluster would run: the container's command, args and env, plus the
variables the job's controller injects into each pod (the training operator's for a PyTorchJob,
Trainer's torch plugin's for a TrainJob: the job API's `pods`), with OnFailure restarts counted
against backoffLimit (`tools.supervisor`).

Deliberate local deviations, all printed at start:
* MASTER_ADDR/PET_MASTER_ADDR are 127.0.0.1 instead of rank 0's name (a PyTorchJob's
  `<job>-master-0` service, a TrainJob's `<job>-node-0-0.<job>`), and MASTER_PORT/PET_MASTER_PORT
  a free local port instead of the container port, so two runs (or a busy 23456 or 29500) never
  collide; a TrainJob's PET_NODE_RANK, which the downward API gives the pod (its Job completion
  index), is the pod's index;
* an elastic job's (`job.elastic`) c10d rendezvous PET_RDZV_ENDPOINT is 127.0.0.1 and that free
  port instead of `<job>-worker-0:23456`; PET_LOCAL_ADDR=127.0.0.1 (torchrun would otherwise
  give its peers this machine's hostname); and PET_RDZV_CONF says `is_host=1` to worker-0's
  agent and `is_host=0` to the others (on a cluster each agent compares the endpoint with its
  own hostname; on loopback every one would match). The agents re-form the group by themselves,
  so a lost replica is restarted alone, and `<checkpoint-root>/.run_local/<pod>.hold` keeps it
  pending (a node that is gone) until the file is removed;
* paths under the image's APP_DIR map to this checkout (an image of your own code: to its
  `image.context`, where a `job.command` runs too), the checkpoint claim's mountPath maps to
  `--checkpoint-root` (default `.checkpoints/<stack>/`), a `job.volumes` claim's to `--volume
  CLAIM=DIR` (default `.claims/<claim>/`; processes could write a read-only one);
* `--checkpoint-root s3://BUCKET[/PREFIX]` (`make local CHECKPOINT_ROOT=s3://...`) keeps the
  run's checkpoints in object storage, as a stack with `checkpoints.storage: s3` does: the
  trainer's `--checkpoint-dir` and CHECKPOINT_DIR are `s3://BUCKET/PREFIX/<job>`, nothing is
  mounted, and the server is the one this environment names (AWS_ENDPOINT_URL_S3, say a
  `python -m tools.s3_server` on this machine; else the stack's `checkpoints.endpoint`), with
  this environment's key (containers get AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY passed in);
* a `job.secretEnv` variable, whose value only the cluster's Secret holds, takes the value of the
  same name in this user's environment (and is said missing without it);
* GPUs are used only when the machine has enough for every replica; otherwise the job runs on
  the CPU (gloo, one process per replica) and says so;
* resource requests/limits, image pull secrets, /dev/shm sizing and scheduling (node selector,
  tolerations, priority class) have no local meaning.

With `--backend container` every replica runs as a container of the training image instead
(`tools/local_backends/container.py`: the image's own paths, the claim mounted at its mountPath,
the master reachable by its pod name on the host's network); the same supervisor runs them, and
each replica's container name is written to `<checkpoint-root>/.run_local/<pod>.container`.

Each replica's process-group id is written to `<checkpoint-root>/.run_local/<pod>.pid` while it
runs (it is also its session id), so a test or a user can kill one "pod" on purpose.

A `job.command` of your own runs as the pods run it (torchrun from this environment, or the
command itself), with the same environment contract (CHECKPOINT_DIR, JOB_NAME, STACK_NAME); the
trainer's flags (--epochs, ...) are refused for it, and the summary lists what it left in its
CHECKPOINT_DIR.

Before any replica starts, `preflight` asks the trainer's own code what it would refuse
(`trainer.cli` parses the very arguments the pod gets, `trainer.resume.preflight` compares the
job's checkpoint directory with them), so such a mistake is one line and exit code 2, not a pod
restarted until backoffLimit.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from builders.job_apis import JobApiError, PodRole, api_of_job, api_of_settings
from builders.manifests import trainer_argument
from machine.ports import free_port
from settings.checkpoint_storage import kept_at
from settings.stack import (
    REPO_ROOT,
    SettingsError,
    StackSettings,
    job_key,
    load_stack_file,
    trainer_settings,
)
from tools.local_backends import LocalBackend, ReplicaPlan
from tools.local_backends.container import (
    DEFAULT_IMAGE,
    ContainerBackend,
    ContainerBackendError,
    parse_env_assignment,
    stack_image,
)
from tools.local_backends.pods import host_environment
from tools.local_backends.process import PathMapper, ProcessBackend, path_mapper
from tools.stack_cli import add_stack_arguments
from tools.supervisor import JobOutcome, JobPolicy, Supervisor
from trainer.storage import FILE_SCHEME, scheme_of

BACKENDS = ("process", "container")
PID_DIR_NAME = ".run_local"
# Where a job.volumes claim's local stand-in is, in this checkout, unless --volume says.
CLAIMS_DIR_NAME = ".claims"
# Flags that override a job setting, JobSettings attribute -> flag: declared with the setting
# (its TrainerFlag's local_flag in settings/stack.py).
OVERRIDE_FLAGS = {
    setting.attribute: setting.flag.local_flag
    for setting in trainer_settings()
    if setting.flag.local_flag is not None
}
STOP_SIGNAL_WORDS = {"SIGINT": "Ctrl-C", "SIGTERM": "SIGTERM"}


class LocalRunError(ValueError):
    """The job cannot run locally as declared; the message says why and what to change."""


def _positive_int(flag: str) -> Any:
    def parse(text: str) -> int:
        if re.fullmatch(r"\s*\+?[0-9]+\s*", text) is None or int(text) < 1:
            raise argparse.ArgumentTypeError(f"{flag} = {text!r}: expected a positive integer")
        return int(text)

    return parse


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m tools.run_local",
        description="Run a stack's job (PyTorchJob or TrainJob) on this machine, one local "
        "process tree per pod.",
    )
    add_stack_arguments(parser)
    parser.add_argument(
        "--checkpoint-root",
        help="local directory standing in for the checkpoint claim (default .checkpoints/<stack>)"
        ", or s3://BUCKET[/PREFIX]: the run keeps its checkpoints there, as a stack with "
        "checkpoints.storage: s3 does (the server: AWS_ENDPOINT_URL_S3 and the key in this "
        "environment)",
    )
    for attribute, flag in OVERRIDE_FLAGS.items():
        parser.add_argument(
            flag, dest=attribute, type=_positive_int(flag), help=f"override {job_key(attribute)}"
        )
    parser.add_argument(
        "--backend",
        default="process",
        help="how each replica runs: process (default; local process trees) or container "
        "(a container of the training image per replica)",
    )
    parser.add_argument(
        "--image",
        help=f"--backend container: the training image (default: what `make image STACK=...` "
        f"builds, {DEFAULT_IMAGE} for the trainer)",
    )
    parser.add_argument(
        "--volume",
        action="append",
        default=[],
        metavar="CLAIM=DIR",
        help="the local directory standing in for a job.volumes claim (repeatable; default "
        f"{CLAIMS_DIR_NAME}/<claim> in this checkout)",
    )
    parser.add_argument(
        "--engine",
        help="--backend container: podman or docker (default: podman if installed, else docker)",
    )
    parser.add_argument(
        "--container-runtime",
        help="--backend container with podman: the OCI runtime (podman --runtime), e.g. runc",
    )
    parser.add_argument(
        "--container-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="--backend container: add NAME=VALUE to every container's environment (repeatable; "
        "a local addition such as a trainer test hook)",
    )
    args = parser.parse_args(argv)
    if args.backend not in BACKENDS:
        parser.error(f"--backend = {args.backend!r}: allowed: {', '.join(BACKENDS)}")
    if args.backend == "process":
        container_only = (
            ("--engine", args.engine),
            ("--container-runtime", args.container_runtime),
            ("--container-env", args.container_env or None),
        )
        for flag, value in container_only:
            if value is not None:
                parser.error(f"{flag} applies only to --backend container")
    try:
        args.container_env = dict(parse_env_assignment(text) for text in args.container_env)
    except ContainerBackendError as error:
        parser.error(str(error))
    args.bucket_root = None
    if args.checkpoint_root is not None:
        if scheme_of(args.checkpoint_root) != FILE_SCHEME:  # a URL: a networked storage's
            args.bucket_root, args.checkpoint_root = args.checkpoint_root, None
        else:
            args.checkpoint_root = Path(args.checkpoint_root.removeprefix("file://"))
    volumes = {}
    for text in args.volume:
        claim, sep, directory = text.partition("=")
        if not sep or not claim or not directory:
            parser.error(f"--volume = {text!r}: expected CLAIM=DIR (a job.volumes claim's name)")
        volumes[claim] = Path(directory)
    args.volume = volumes
    return args


def apply_overrides(settings: StackSettings, args: argparse.Namespace) -> StackSettings:
    """The stack's settings with the flags' values (a --save-every beyond --epochs is fine: the
    trainer always saves the last epoch). They are the trainer's: a job.command of your own
    takes its own arguments, so there they are refused."""
    changes = {
        attribute: getattr(args, attribute)
        for attribute in OVERRIDE_FLAGS
        if getattr(args, attribute) is not None
    }
    if changes and not settings.job.runs_trainer:
        attribute = next(iter(changes))
        raise LocalRunError(
            f"{OVERRIDE_FLAGS[attribute]} sets {job_key(attribute)}, which only the project's "
            "trainer reads; the stack runs job.command: give your script its own arguments there"
        )
    return dataclasses.replace(settings, job=dataclasses.replace(settings.job, **changes))


def in_storage_of_root(settings: StackSettings, storage_root: str | None) -> StackSettings:
    """The run's checkpoints where `--checkpoint-root URL` says: `s3://BUCKET[/PREFIX]` makes
    any stack's run keep them in that bucket, as a stack with `checkpoints.storage: s3` does.
    And a networked storage is reached as this environment says (AWS_ENDPOINT_URL_S3: a server
    on this machine, say) rather than as the stack's pods do (by a name this machine may not
    resolve)."""
    checkpoints = settings.checkpoints
    if storage_root is not None:
        try:
            moved = kept_at(checkpoints, storage_root)
        except ValueError as error:
            raise LocalRunError(f"--checkpoint-root = {storage_root!r}: {error}") from None
        if moved is None:
            raise LocalRunError(
                f"--checkpoint-root = {storage_root!r}: expected a directory or "
                "s3://BUCKET[/PREFIX]"
            )
        checkpoints = moved
    checkpoints = checkpoints.backend.on_this_machine(checkpoints, os.environ)
    return dataclasses.replace(settings, checkpoints=checkpoints)


def data_dirs(
    settings: StackSettings, chosen: Mapping[str, Path], repo_root: Path
) -> dict[str, Path]:
    """The local directory of each `job.volumes` claim: `--volume CLAIM=DIR`, else
    `.claims/<claim>` in this checkout. A --volume of a claim the job does not mount is refused."""
    claims = [volume.claim for volume in settings.job.volumes]
    for claim in chosen:
        if claim not in claims:
            mounted = ", ".join(claims) or "none"
            raise LocalRunError(
                f"--volume {claim}=...: the job mounts no claim {claim!r} (job.volumes: {mounted})"
            )
    return {
        claim: (chosen.get(claim) or repo_root / CLAIMS_DIR_NAME / claim).resolve()
        for claim in claims
    }


def volume_lines(settings: StackSettings, dirs: Mapping[str, Path], backend: str) -> list[str]:
    """What each data claim is here; the processes cannot be kept from writing a read-only one."""
    lines = []
    for volume in settings.job.volumes:
        mode = "read-only" if volume.read_only else "read-write"
        if volume.read_only and backend == "process":
            mode += " on the cluster; local processes could write it"
        lines.append(
            f"volume {volume.claim} at {volume.mount_path} is {dirs[volume.claim]} ({mode})"
        )
    return lines


def setting_name(field: str, args: argparse.Namespace) -> str | None:
    """How the user set what the trainer's `field` carries: its stack key, and the flag when
    one overrode it; None when no stack setting carries it (the seed)."""
    argument = trainer_argument(field)
    if argument is None:
        return None
    flag = OVERRIDE_FLAGS.get(argument.attribute or "")
    overridden = flag is not None and getattr(args, argument.attribute or "", None) is not None
    return f"{flag} ({argument.setting})" if overridden else argument.setting


def rank0(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> PodRole:
    """The pod rank 0 runs in (the job API lists it first)."""
    return api_of_job(job).pods(job, runtime)[0]


@contextlib.contextmanager
def importable(directory: Path | None) -> Iterator[None]:
    """`directory` first on sys.path while the trainer's parser imports a `job.task` of your own
    package (the replicas have it on PYTHONPATH)."""
    if directory is None:
        yield
        return
    sys.path.insert(0, str(directory))
    try:
        yield
    finally:
        sys.path.remove(str(directory))


def trainer_argv(job: Mapping[str, Any], checkpoint_root: Path, repo_root: Path) -> list[str]:
    """The trainer's command line in the master pod, with this machine's paths: the container's
    args after entrypoint.sh's own flags (see builders.manifests.trainer_args)."""
    role = rank0(job)
    template, container = role.template, role.container
    args = [str(part) for part in container.get("args", [])]
    mapper = path_mapper(template, container, checkpoint_root, repo_root)
    return [mapper(part) for part in args[args.index("--") + 1 if "--" in args else 0 :]]


def preflight(
    job: Mapping[str, Any],
    settings: StackSettings,
    args: argparse.Namespace,
    *,
    checkpoint_root: Path,
    repo_root: Path,
) -> None:
    """What the trainer would refuse, asked of the trainer's own code before anything starts:
    a checkpoint root or job directory that cannot be used, arguments it rejects, checkpoints
    of another run (other batch size, dataset size, task or world size) in the job's
    directory. Nothing is created. Raises LocalRunError, one line naming the setting."""
    # Imported here: torch comes with them, and only a run that got this far needs it.
    from trainer.cli import UsageError, parse_config
    from trainer.resume import GLOBAL_BATCH, WORLD_SIZE, ResumeRefusedError
    from trainer.resume import preflight as trainer_preflight
    from trainer.storage import open_storage

    root = f"--checkpoint-root = '{checkpoint_root}'"
    allowed = "pass a directory this user can write (it is created if missing)"
    if (problem := open_storage(checkpoint_root).unusable()) is not None:
        raise LocalRunError(f"{root}: {problem}; {allowed}")
    if not settings.job.runs_trainer:
        return  # your own command: what it accepts is its own business
    argv = trainer_argv(job, checkpoint_root, repo_root)
    unchecked_task: str | None = None
    if args.backend == "container" and "--task" in argv:
        # The image may hold a task this checkout lacks: the container finds out, not the host.
        # Its name is all the resume check needs (the fingerprint covers the string).
        at = argv.index("--task")
        argv, unchecked_task = [*argv[:at], *argv[at + 2 :]], argv[at + 1]
    try:
        with importable(code_dir(settings, repo_root)):
            config = parse_config(argv)
    except UsageError as error:
        if error.field == "checkpoint_dir":
            raise LocalRunError(f"{root}: the job's directory: {error}; {allowed}") from None
        argument = trainer_argument(error.field) if error.field else None
        where = f"{argument.setting}: " if argument else f"the trainer's arguments {argv}: "
        raise LocalRunError(f"{where}{error}") from None
    if unchecked_task is not None:
        config = dataclasses.replace(config, task=unchecked_task)
    world_size = settings.job.nodes * settings.job.nproc_per_node
    try:
        trainer_preflight(config, world_size)
    except ResumeRefusedError as error:
        mismatch, directory = error.mismatch, config.checkpoint_dir
        if mismatch is None:
            raise LocalRunError(str(error)) from None
        other_ways = (
            f"to start over, another --checkpoint-root (or delete {directory}); to continue "
            "from their weights, a new run with job.initFrom and a new job.name"
        )
        if mismatch.setting == WORLD_SIZE:
            raise LocalRunError(
                f"job.nodes x job.gpusPerNode = {mismatch.current} processes: the checkpoints "
                f"in {directory} belong to a run whose global batch of {mismatch.saved} samples "
                f"per step at most {mismatch.saved} processes can share; {other_ways}"
            ) from None
        if mismatch.setting == GLOBAL_BATCH:
            raise LocalRunError(
                f"job.batchSize x job.nodes x job.gpusPerNode = {mismatch.current} samples per "
                f"step, the elastic job's global batch: the checkpoints in {directory} were "
                f"written with {mismatch.saved} (a checkpoint resumes on any number of nodes, "
                f"but with its own global batch); {other_ways}"
            ) from None
        name = setting_name(mismatch.setting, args)
        if name is None:  # the seed, or unknown: the trainer's words
            raise LocalRunError(str(error)) from None
        raise LocalRunError(
            f"{name} = {mismatch.current!r}: the checkpoints in "
            f"{directory} were written with {mismatch.saved!r} (a checkpoint resumes only a run "
            f"with the same batch size, dataset size, seed and task); use {mismatch.saved!r} to "
            f"resume them; {other_ways}"
        ) from None


def job_policy(job: Mapping[str, Any], runtime: Mapping[str, Any] | None = None) -> JobPolicy:
    api = api_of_job(job)
    master = rank0(job, runtime)
    grace = float(master.template["spec"].get("terminationGracePeriodSeconds", 30))
    return JobPolicy(
        success_replica=master.name,
        elastic=api.is_elastic(job),
        backoff_limit=api.backoff_limit(job, runtime),
        grace_seconds=grace,
        active_deadline_seconds=api.active_deadline_seconds(job),
        restart_delay_seconds=2.0,
        max_restart_delay_seconds=30.0,
    )


def code_dir(settings: StackSettings, repo_root: Path) -> Path | None:
    """Your own image's code on disk (`image.context`), None for the trainer's image."""
    if settings.image.trainer_context:
        return None
    return repo_root / settings.image.context


def checkpoint_summary(checkpoint_dir: str | Path, env: Mapping[str, str]) -> dict[str, Any] | None:
    """What the trainer's own inspector says about the checkpoint; None when there is none."""
    result = subprocess.run(
        [sys.executable, "-m", "trainer.checkpoint", str(checkpoint_dir)],
        env={**env, "PYTHONPATH": str(REPO_ROOT)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    if result.returncode != 0:
        return None
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:
        return None


def headline(
    outcome: JobOutcome, info: Mapping[str, Any] | None, master: str, *, trainer: bool = True
) -> str:
    """The summary's first line. A stop by signal says where it stopped: "stopped by Ctrl-C at
    epoch N (checkpoint saved)" when the master's trainer exited 128 + SIGTERM, the code of a
    stop with its checkpoint committed. A command of your own (`trainer` false) has no manifest
    to say where it was."""
    if outcome.status != "Interrupted":
        return f"{outcome.status} ({outcome.reason})"
    signal_name = outcome.signal_name or "a signal"
    stopped = f"stopped by {STOP_SIGNAL_WORDS.get(signal_name, signal_name)}"
    if not trainer:
        return f"{stopped}; the same command resumes it if job.command resumes from $CHECKPOINT_DIR"
    if info is None:
        return f"{stopped} before the first checkpoint (nothing saved)"
    epoch = info["epochs_completed"] + (1 if info.get("step_in_epoch") else 0)
    saved = outcome.exit_codes.get(master) == 128 + signal.SIGTERM
    what = "checkpoint saved" if saved else "the newest checkpoint is from before the stop"
    return f"{stopped} at epoch {epoch} ({what}); the same command resumes it"


def directory_listing(directory: str | Path) -> str:
    """What a command of your own left in its CHECKPOINT_DIR: its entries, or that it is empty."""
    if not isinstance(directory, Path):
        return f"in object storage, {directory}"
    entries = sorted(path.name for path in directory.iterdir()) if directory.is_dir() else []
    shown = ", ".join(entries[:8]) + (f" and {len(entries) - 8} more" if len(entries) > 8 else "")
    return shown or "nothing yet"


def print_summary(
    outcome: JobOutcome,
    settings: StackSettings,
    checkpoint_dir: str | Path,
    env: Mapping[str, str],
) -> None:
    trainer = settings.job.runs_trainer
    info = checkpoint_summary(checkpoint_dir, env) if trainer else None
    epochs = (
        f"{info['epochs_completed']} of {settings.job.total_epochs}"
        if info is not None
        else f"none (no usable checkpoint in {checkpoint_dir})"
    )
    if info is not None and (steps := info.get("step_in_epoch")):
        epochs += f" (and {steps} step{'s' if steps > 1 else ''} of the next)"
    restarts = ", ".join(f"{pod} {count}" for pod, count in outcome.restarts.items())
    if any(outcome.recreations.values()):
        restarts += (
            " (recreated: "
            + ", ".join(f"{pod} {count}" for pod, count in outcome.recreations.items())
            + ")"
        )
    master = api_of_settings(settings).rank0_pod(settings)
    lines = ["", f"job {settings.job.name}: {headline(outcome, info, master, trainer=trainer)}"]
    if outcome.status == "Failed" and (error := outcome.last_error()) is not None:
        lines.append(f"  last error:       [{error[0]}] {error[1]}")
    if trainer:
        lines.append(f"  epochs completed: {epochs}")
    else:
        lines.append(f"  CHECKPOINT_DIR:   {directory_listing(checkpoint_dir)}")
    lines += [
        f"  checkpoint:       {checkpoint_dir}",
        f"  restarts:         {restarts}",
        f"  wall time:        {outcome.wall_seconds:.1f}s",
    ]
    print("\n".join(lines), flush=True)


def make_backend(args: argparse.Namespace, settings: StackSettings) -> LocalBackend:
    if args.backend == "container":
        checkpoints = settings.checkpoints
        return ContainerBackend(
            image=args.image or stack_image(args.stack, settings),
            engine=args.engine,
            container_runtime=args.container_runtime,
            extra_env={
                **checkpoints.backend.machine_credentials(checkpoints, os.environ),
                **args.container_env,
            },
            repo_root=REPO_ROOT,
        )
    return ProcessBackend(REPO_ROOT, code_dir(settings, REPO_ROOT))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    repo_root = REPO_ROOT
    master_port = free_port()
    try:
        stack_settings = in_storage_of_root(
            apply_overrides(load_stack_file(args.stack, args.stack_dir), args), args.bucket_root
        )
        backend = make_backend(args, stack_settings)
        settings, device_notice = backend.fit_to_machine(stack_settings)
        checkpoint_root = (
            args.checkpoint_root or repo_root / ".checkpoints" / args.stack
        ).resolve()
        volumes = data_dirs(settings, args.volume, repo_root)
        api = api_of_settings(settings)
        job = api.job_manifest(settings, image=backend.image)
        runtime = api.runtime_manifest(settings)
        backend.check_job(job)
        commands, notices = backend.replica_commands(
            job, ReplicaPlan(settings.namespace, checkpoint_root, master_port, runtime, volumes)
        )
        preflight(job, settings, args, checkpoint_root=checkpoint_root, repo_root=repo_root)
    except (SettingsError, LocalRunError, JobApiError, ContainerBackendError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    checkpoint_root.mkdir(parents=True, exist_ok=True)
    for directory in volumes.values():
        directory.mkdir(parents=True, exist_ok=True)
    try:
        backend.prepare(job, checkpoint_root, runtime)
    except ContainerBackendError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # A mounted storage's path is a directory of this machine; a networked one's root a URL.
    mount_path = settings.checkpoints.backend.mount_path(settings.checkpoints)
    checkpoint_dir: str | Path = (
        settings.checkpoint_dir
        if mount_path is None
        else Path(PathMapper({mount_path: checkpoint_root})(settings.checkpoint_dir))
    )
    pid_dir = checkpoint_root / PID_DIR_NAME
    supervisor = Supervisor(commands, job_policy(job, runtime), pid_dir=pid_dir)
    for notice in dict.fromkeys(
        [device_notice, *notices, *volume_lines(settings, volumes, args.backend)]
    ):
        if notice:
            supervisor.say(notice)
    backend.record(commands, pid_dir)
    master = rank0(job, runtime)
    supervisor.say(
        f"stack {args.stack}: {job['kind']} {settings.job.name}, "
        f"{len(commands)} replica(s) ({', '.join(c.name for c in commands)}) as "
        f"{backend.runs_as}, nprocPerNode {master.env.get('PET_NPROC_PER_NODE')}, "
        f"{backend.rendezvous(job, master_port)}, checkpoints in {checkpoint_dir}"
    )
    outcome = supervisor.run()
    summary_env = {**host_environment(), **settings.checkpoints.client_environment}
    print_summary(outcome, settings, checkpoint_dir, summary_env)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
