"""machine/ports.py: a port handed out is not handed to another caller on this machine while the
process that asked lives (the kernel alone repeats them within seconds); the ledger forgets the
ports of processes that are gone, of a reused pid and of long ago; without a usable ledger the
kernel's word is still a free port."""

from __future__ import annotations

import json
import multiprocessing
import socket
import subprocess
import sys
import time
from pathlib import Path

from machine import ports
from machine.ports import HOLD_S, free_port


def ports_of(ledger: Path, count: int) -> list[int]:
    return [free_port(ledger=ledger) for _ in range(count)]


def test_one_process_is_never_handed_a_port_twice(tmp_path: Path) -> None:
    handed = ports_of(tmp_path / "ports.json", 400)
    assert len(set(handed)) == len(handed)


def test_two_processes_asking_at_once_never_share_a_port(tmp_path: Path) -> None:
    ledger = tmp_path / "ports.json"
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        first, second = pool.starmap(ports_of, [(ledger, 300), (ledger, 300)])
    assert set(first).isdisjoint(second)
    assert len(set(first)) == len(first) and len(set(second)) == len(second)


def test_every_handed_port_is_free_to_bind(tmp_path: Path) -> None:
    for port in ports_of(tmp_path / "ports.json", 20):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_the_ledger_forgets_gone_processes_reused_pids_and_old_entries(tmp_path: Path) -> None:
    ledger = tmp_path / "ports.json"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone_started = ports._started(gone.pid)
    gone.wait()
    me, my_start, now = ports.os.getpid(), ports._started(ports.os.getpid()), time.time()
    assert gone_started is not None and my_start is not None
    ledger.write_text(
        json.dumps(
            {
                "1": {"pid": gone.pid, "started": gone_started, "at": now},
                "2": {"pid": me, "started": my_start - 60, "at": now},  # another process's pid
                "3": {"pid": me, "started": my_start, "at": now - HOLD_S - 1},
                "4": {"pid": me, "started": my_start, "at": now},
                "5": "not an entry",
            }
        )
    )
    handed = free_port(ledger=ledger)
    assert set(json.loads(ledger.read_text())) == {"4", str(handed)}


def test_without_a_usable_ledger_the_kernels_port_is_handed(tmp_path: Path) -> None:
    not_a_file = tmp_path / "ports.json"
    not_a_file.mkdir()
    port = free_port(ledger=not_a_file)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
    garbled = tmp_path / "garbled.json"
    garbled.write_text("{not json")
    free_port(ledger=garbled)
    assert len(json.loads(garbled.read_text())) == 1
