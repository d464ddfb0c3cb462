from __future__ import annotations

from pathlib import Path

from tests.support.timings import ModuleTimings


def test_rows_sum_each_modules_seconds_in_the_order_they_ran(tmp_path: Path) -> None:
    timings = ModuleTimings()
    timings.add("test_b.py", 1.2)
    timings.add("test_a.py", 3.0)
    timings.add("test_b.py", 2.4)
    timings.fail("test_a.py")
    table = tmp_path / "timings.tsv"
    table.write_text("venv\t80\tcold\n")
    timings.write("e2e module", str(table))
    assert table.read_text().splitlines() == [
        "venv\t80\tcold",
        "e2e module test_b.py\t4\tpassed",
        "e2e module test_a.py\t3\tFAILED",
    ]
