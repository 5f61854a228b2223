"""A real ``inspect eval`` (model ``mockllm/model``) on a tiny task whose solver and scorer
use the ``createos`` sandbox, found through the package's entry point, on an emulator."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the [inspect] extra is not installed")

from createos_sync.emulator import Emulator

from ..waiting import wait_until

TASKS = Path(__file__).with_name("inspect_tasks.py")
MOCK = ["--model", "mockllm/model"]
EVAL = [str(Path(sys.executable).with_name("inspect")), "eval"]


def _environment(emulator: Emulator, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CREATEOS_", "INSPECT_"))}
    env.update(
        CREATEOS_API_URL=emulator.url,
        CREATEOS_API_KEY=emulator.api_key,
        CREATEOS_SYNC_STATE_DIR=str(tmp_path / "state"),
        INSPECT_LOG_DIR=str(tmp_path / "logs"),
        INSPECT_DISPLAY="plain",
        INSPECT_TASK_MARKERS=str(tmp_path),
    )
    return env


@pytest.mark.parametrize(
    ("task", "samples"),
    [
        ("shouting", 3),
        # exec_remote: Inspect's injected tools run as a server that outlives the command
        # that starts it, as on the service (issue 38).
        ("streaming", 1),
    ],
)
def test_every_sample_is_scored_and_nothing_is_left(
    emulator: Emulator, tmp_path: Path, task: str, samples: int
) -> None:
    done = subprocess.run(
        [*EVAL, f"{TASKS}@{task}", *MOCK, "--log-format", "json", "--limit", str(samples)],
        env=_environment(emulator, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [log] = (tmp_path / "logs").glob("*.json")
    data = json.loads(log.read_text())
    assert data["status"] == "success"
    assert [s["scores"]["in_sandbox"]["value"] for s in data["samples"]] == ["C"] * samples
    assert emulator.live_sandboxes() == []


def test_sigint_once_the_sandboxes_exist_leaves_nothing_alive(
    emulator: Emulator, tmp_path: Path
) -> None:
    eval_ = subprocess.Popen(
        [*EVAL, f"{TASKS}@hanging", *MOCK],
        env=_environment(emulator, tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        # Each sample touches its marker once its sandbox exists, then sleeps in it.
        wait_until(
            lambda: len(list(tmp_path.glob("sample-*"))) == 3 or eval_.poll() is not None,
            "three samples in their sandboxes",
            timeout=120,
        )
        assert eval_.poll() is None, eval_.communicate()[0][-3000:]
        assert len(emulator.live_sandboxes()) == 3
        eval_.send_signal(signal.SIGINT)
        out, _ = eval_.communicate(timeout=120)
    finally:
        if eval_.poll() is None:
            eval_.kill()
            eval_.wait()

    assert emulator.live_sandboxes() == [], out[-3000:]
    assert emulator.live_processes() == []


def test_the_example_scores_every_sample(emulator: Emulator, tmp_path: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "inspect_task.py"

    done = subprocess.run(
        [sys.executable, str(example)],
        env=_environment(emulator, tmp_path),
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "success: 3 of 3 samples correct" in done.stdout
    assert emulator.live_sandboxes() == []
