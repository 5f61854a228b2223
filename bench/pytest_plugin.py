"""What the pytest plugin costs a pytest run that does not use it (issue 37).

Every pytest run of an environment where ``createos-sync`` is installed
loads its ``pytest11`` entry point. This times an unrelated one-test file,
``pytest -q``, in a fresh interpreter each time, with the plugin loaded and
with ``-p no:createos``, interleaved, and prints the medians and their
difference, in CPU time (user + system of the child: wall time on a shared,
loaded machine is mostly waiting) and in wall time; plus whether the entry
point imports the SDK.

    python bench/pytest_plugin.py [--runs 9]
"""

from __future__ import annotations

import argparse
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNRELATED = "def test_unrelated():\n    assert 1 + 1 == 2\n"


def timed(project: Path, *args: str) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one pytest run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def entry_point_import_ms() -> float:
    """The cumulative import time of the entry point module, in ms (``-X importtime``)."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import createos_sync_pytest"],
        capture_output=True,
        text=True,
        check=True,
    )
    line = [row for row in done.stderr.splitlines() if row.endswith("| createos_sync_pytest")]
    return int(line[-1].split("|")[1]) / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        project = Path(directory)
        (project / "test_unrelated.py").write_text(UNRELATED)
        timed(project)  # warm the file system caches
        loaded, without = [], []
        for _ in range(args.runs):
            loaded.append(timed(project))
            without.append(timed(project, "-p", "no:createos"))
    print(f"unrelated one-test pytest run, median of {args.runs} (fresh interpreter each):")
    for index, what in ((0, "CPU"), (1, "wall")):
        with_plugin = statistics.median(run[index] for run in loaded)
        no_plugin = statistics.median(run[index] for run in without)
        print(
            f"- {what:4}: with the plugin {with_plugin:.3f} s, -p no:createos {no_plugin:.3f} s, "
            f"plugin's cost {with_plugin - no_plugin:+.3f} s ({with_plugin / no_plugin:.2f}x)"
        )
    try:
        imported = entry_point_import_ms()
    except subprocess.CalledProcessError:  # a version before issue 37: no such module
        print("entry point createos_sync_pytest: not installed (an older version)")
        return
    print(f"entry point import (createos_sync_pytest, cumulative): {imported:.1f} ms")
    sdk = (
        "createos_sync"
        in subprocess.run(
            [sys.executable, "-c", "import sys, createos_sync_pytest; print(*sys.modules)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    )
    print(f"the entry point imports the SDK: {sdk}")


if __name__ == "__main__":
    main()
