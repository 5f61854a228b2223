"""Every example runs against the emulator, so that none of them rots."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.desktop import missing_packages
from createos_sync.journal import Journal

from ..ports import free_port
from .subprocesses import emulator_env, finish, spawn

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# What each script must print (on stdout) when it works.
EXPECTED = {
    "quickstart.py": ["hello from", "42", "round trip", "exit_code=3"],
    "ci_job.py": ["Ran 1 test", "tests passed (demo project: the report above is not kept)"],
    "files_roundtrip.py": ["100% of 3145728 bytes", "every file came back intact"],
    "background_server.py": ["hello from the sandbox", '"GET /hello.txt HTTP/1.1" 200'],
    "prepare_once.py": [
        "fork: tool ready: shard 3",
        "template prepare-once is ready",
        "template: tool ready: shard 1",
        "every job ran on the prepared setup",
    ],
    "web_preview.py": [
        "preview URL: http://",
        "<h1>hello from a web app in the sandbox",
        "shop received cookies: session-shop=s3cret",
        "blog received cookies: ",  # none with an origin per preview, else the shop's
    ],
    "desktop_screenshot.py": ["screen: 1024x768", "hello from the desktop", "screenshot: 1024x768"],
    "ci_cache_disk.py": ["job 2: cache hit: deps built by job"],
    "app_and_database.py": ["database at ", "app got: hello from the database", "networks left: 0"],
}
# The emulator's desktop needs Xvfb and friends (.ci/run installs them).
RUNNABLE = [n for n in EXPECTED if n != "desktop_screenshot.py" or not missing_packages()]


# Examples of a framework need its extra: tests/integrations runs them (.ci/integrations.sh).
FRAMEWORKS = {"inspect_task.py"}


def test_every_script_is_tested() -> None:
    # test_*.py examples are pytest files: tests/integration/test_pytest_plugin.py runs them
    scripts = [
        p.name
        for p in EXAMPLES.glob("*.py")
        if not p.name.startswith("test_") and p.name not in FRAMEWORKS
    ]
    assert sorted(scripts) == sorted(EXPECTED)


def test_the_scripts_run(emulator: Emulator, tmp_path: Path) -> None:
    env = emulator_env(emulator, PREVIEW_PORT=str(free_port()))
    failing = tmp_path / "failing"
    failing.mkdir()
    (failing / "test_fails.py").write_text(
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_no(self):\n        self.fail('on purpose')\n"
    )
    offline_env = {k: v for k, v in env.items() if k != "CREATEOS_API_KEY"}
    procs = [spawn([sys.executable, str(EXAMPLES / name)], env) for name in RUNNABLE]
    procs.append(spawn([sys.executable, str(EXAMPLES / "ci_job.py"), str(failing)], env))
    # Without CREATEOS_API_KEY an example starts an emulator of its own.
    procs.append(spawn([sys.executable, str(EXAMPLES / "quickstart.py")], offline_env))
    *outcomes, red_ci, offline = [finish(p) for p in procs]
    for name, (status, out, err) in zip(RUNNABLE, outcomes, strict=True):
        assert status == 0, f"{name} failed:\n{err}"
        for text in EXPECTED[name]:
            assert text in out, f"{name} did not print {text!r}:\n{out}"

    status, out, err = red_ci
    assert status == 1, err
    assert f"tests failed: report saved as {failing / 'report.txt'}" in out
    assert "AssertionError: on purpose" in (failing / "report.txt").read_text()
    # without a project, no path is reported: the demo's directory is gone at exit
    assert "report saved" not in outcomes[RUNNABLE.index("ci_job.py")][1]

    status, out, err = offline
    assert status == 0, err
    assert out.startswith("(no CREATEOS_API_KEY: local emulator")
    assert Journal().entries() == []


def test_the_notebook_runs_cell_by_cell(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    notebook = json.loads((EXAMPLES / "notebook.ipynb").read_text())
    assert (notebook["nbformat"], notebook["nbformat_minor"]) == (4, 5)
    assert notebook["metadata"]["kernelspec"]["language"] == "python"
    cells = notebook["cells"]
    assert len({cell["id"] for cell in cells}) == len(cells)
    code = [cell for cell in cells if cell["cell_type"] == "code"]
    assert all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)

    monkeypatch.setenv("CREATEOS_API_URL", emulator.url)
    monkeypatch.setenv("CREATEOS_API_KEY", emulator.api_key)
    namespace: dict[str, object] = {}
    for number, cell in enumerate(code):
        exec(compile("".join(cell["source"]), f"<notebook cell {number}>", "exec"), namespace)
        if number == 1:  # the lease stays open between cells
            box = namespace["box"]
            assert isinstance(box, cs.Lease) and box.id in emulator.live_sandboxes()
    out = capsys.readouterr().out
    assert "step 1\nstep 2\nstep 3\n" in out  # echo=True
    assert "tick 5" in out
    box, result = namespace["box"], namespace["result"]
    assert isinstance(box, cs.Lease) and box.closed
    assert "CreateOS lease" in box._repr_html_()
    assert isinstance(result, cs.RunResult) and "exit_code=0" in result._repr_html_()


@pytest.mark.skipif(bool(missing_packages()), reason="the emulator's desktop is not installed")
def test_the_desktop_notebook_shows_a_screenshot(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = json.loads((EXAMPLES / "desktop.ipynb").read_text())
    assert (notebook["nbformat"], notebook["nbformat_minor"]) == (4, 5)
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    monkeypatch.setenv("CREATEOS_API_URL", emulator.url)
    monkeypatch.setenv("CREATEOS_API_KEY", emulator.api_key)
    namespace: dict[str, object] = {}
    for number, cell in enumerate(code):
        exec(compile("".join(cell["source"]), f"<notebook cell {number}>", "exec"), namespace)
    shot, box = namespace["shot"], namespace["box"]
    assert isinstance(shot, cs.Screenshot) and shot.size == (1024, 768)
    assert shot._repr_png_().startswith(b"\x89PNG")  # what Jupyter shows inline
    assert isinstance(box, cs.Lease) and box.closed
