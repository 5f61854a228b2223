"""CI job: run a project's tests in a fresh sandbox and exit with their status.

    python examples/ci_job.py [PROJECT_DIR]

The project directory is uploaded as a tree, its tests run with live output,
and the report comes back next to the project, also when the tests fail.
``max_lifetime`` bounds what a hung job can cost: the sandbox is destroyed
at expiry whatever the job is doing. Without PROJECT_DIR a small demo
project in a temporary directory is used: its report is shown live and not
kept. Runs against CreateOS when CREATEOS_API_KEY is set, else against the
local emulator (``pip install 'createos-sync[emulator]'``).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from pathlib import Path

import createos_sync as cs

REMOTE = "/workspace/project"
# The test run's own exit status, not tee's, decides the job.
TEST_COMMAND = "python3 -m unittest -v 2>&1 | tee report.txt; exit ${PIPESTATUS[0]}"


def main(client: cs.Client, project: Path, *, keep_report: bool = True) -> int:
    with cs.lease(client=client, max_lifetime=15 * 60) as box:
        box.upload_dir(project, REMOTE)
        result = box.run(TEST_COMMAND, cwd=REMOTE, timeout=10 * 60, echo=True)
        if keep_report:
            box.download(f"{REMOTE}/report.txt", project / "report.txt")
    if result.timed_out:
        print("the tests timed out", file=sys.stderr)
        return 124
    verdict = "passed" if result.ok else "failed"
    if keep_report:
        print(f"tests {verdict}: report saved as {project / 'report.txt'}")
    else:  # the demo project lives in a temporary directory: nothing of it is kept
        print(f"tests {verdict} (demo project: the report above is not kept)")
    return result.exit_code if result.exit_code is not None else 1


def demo_project(directory: Path) -> Path:
    (directory / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    (directory / "test_calc.py").write_text(
        "import unittest\n\nfrom calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    )
    return directory


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        if len(sys.argv) > 1:
            project = Path(sys.argv[1])
        else:
            project = demo_project(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        if os.environ.get("CREATEOS_API_KEY"):
            client = stack.enter_context(cs.Client())
        else:
            from createos_sync.emulator import Emulator

            emulator = stack.enter_context(Emulator())
            client = stack.enter_context(contextlib.closing(emulator.client()))
        status = main(client, project, keep_report=len(sys.argv) > 1)
    sys.exit(status)
