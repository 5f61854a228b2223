"""Real Harbor trials (agent ``oracle``) in CreateOS sandboxes, on an emulator.

The tiny task's Dockerfile has a ``RUN`` (built into a template) and a
``COPY`` of its build context (applied after start by uploading); the
solution adds the two, and the tests reward 1.0 when it wrote 42.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("harbor", reason="the [harbor] extra is not installed (Python >= 3.12)")

from createos_sync.emulator import Emulator

TASK = Path(__file__).resolve().parents[2] / "examples" / "harbor_task"  # the example itself
HARBOR = str(Path(sys.executable).with_name("harbor"))
ENVIRONMENT = "createos_sync.integrations.harbor:CreateOSEnvironment"
RUN = [HARBOR, "run", "-p", str(TASK), "-a", "oracle", "--env", ENVIRONMENT]


def _harbor(emulator: Emulator, tmp_path: Path, *extra: str) -> dict[str, object]:
    """One ``harbor run`` of the tiny task with the oracle; its job's result.json."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CREATEOS_")}
    env.update(
        CREATEOS_API_URL=emulator.url,
        CREATEOS_API_KEY=emulator.api_key,
        CREATEOS_SYNC_STATE_DIR=str(tmp_path / "state"),
        HARBOR_TELEMETRY="0",
        LITELLM_LOCAL_MODEL_COST_MAP="True",  # no fetch of a price list at import
    )
    jobs = tmp_path / f"jobs-{len(list(tmp_path.glob('jobs-*')))}"
    done = subprocess.run(
        [*RUN, "-o", str(jobs), "-y", *extra],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [result] = jobs.glob("*/result.json")
    return json.loads(result.read_text())  # type: ignore[no-any-return]


def _rewards(result: dict[str, object]) -> dict[str, list[str]]:
    [stats] = result["stats"]["evals"].values()  # type: ignore[index]
    assert stats["n_errors"] == 0, stats
    return stats["reward_stats"]["reward"]  # type: ignore[no-any-return]


def test_oracle_trial_scores_1_and_leaves_nothing(emulator: Emulator, tmp_path: Path) -> None:
    first = _harbor(emulator, tmp_path)
    assert list(_rewards(first)) == ["1.0"]
    assert emulator.live_sandboxes() == []

    second = _harbor(emulator, tmp_path)  # the same Dockerfile: its template is reused

    assert list(_rewards(second)) == ["1.0"]
    assert emulator.live_sandboxes() == []
    with emulator.client() as client:
        assert len(client.templates()) == 1


def test_no_delete_keeps_the_sandbox(emulator: Emulator, tmp_path: Path) -> None:
    result = _harbor(emulator, tmp_path, "--no-delete")

    assert list(_rewards(result)) == ["1.0"]
    [kept] = emulator.live_sandboxes()
    with emulator.client() as client:
        client.destroy(kept)


def test_the_dockerfile_is_split_into_a_template_and_uploads() -> None:
    from createos_sync.integrations.harbor import _split

    text, copies, workdir = _split(
        "FROM ubuntu:24.04\nRUN apt-get update && \\\n    apt-get install -y jq\n"
        "COPY a.txt b/ /opt/x/\nWORKDIR /app\nADD ctx .\n"
    )

    assert (
        text
        == "FROM ubuntu:24.04\nRUN apt-get update &&      apt-get install -y jq\nWORKDIR /app\n"
    )
    assert copies == [("a.txt", "/opt/x/"), ("b/", "/opt/x/"), ("ctx", ".")]
    assert workdir == "/app"
    with pytest.raises(ValueError, match="after start"):
        _split("FROM ubuntu:24.04\nCOPY --from=builder /x /y\n")
