"""``createos-sync template ...`` and ``run --fork-from / --rootfs``, in subprocesses."""

from __future__ import annotations

import json
from pathlib import Path

from createos_sync import Client, Lease
from createos_sync.emulator import Emulator

from .subprocesses import CLI, run_all

DOCKERFILE = """\
FROM ubuntu:24.04
ENV FROM_TEMPLATE=yes
RUN echo built > /workspace/built.txt && echo step output
"""


def test_template_build_ls_run_on_it_and_rm(
    env: dict[str, str], tmp_path: Path, client: Client
) -> None:
    (tmp_path / "Dockerfile").write_text(DOCKERFILE)
    (tmp_path / "Failing").write_text("FROM ubuntu:24.04\nRUN echo about to fail; exit 7\n")
    ok, failed, missing = run_all(
        [*CLI, "template", "build", "cli-demo", "-f", str(tmp_path / "Dockerfile")],
        [*CLI, "template", "build", "cli-failing", "-f", str(tmp_path / "Failing")],
        [*CLI, "template", "build", "x", "-f", str(tmp_path / "nowhere")],
        env=env,
    )
    status, out, err = ok
    assert status == 0, err
    assert "STEP 2/3: ENV FROM_TEMPLATE=yes" in out and "step output" in out  # the log, live
    [template] = [t for t in client.templates() if t.name == "cli-demo"]
    assert f"template {template.id} (cli-demo) is ready" in err

    status, out, err = failed
    assert status == 1
    assert "about to fail" in out  # streamed live, once: the error points at it
    assert "RUN failed (exit code 7)" not in err and "about to fail" not in err
    assert "failed to build: its log is above; delete it with" in err
    nowhere = tmp_path / "nowhere"
    assert missing[0] == 2 and f"cannot read the Dockerfile {nowhere}: " in missing[2]

    listed, on_template, table = run_all(
        [*CLI, "template", "ls", "--json"],
        [*CLI, "run", "--rootfs", template.id, "--", "cat built.txt; echo $FROM_TEMPLATE"],
        [*CLI, "template", "ls"],
        env=env,
    )
    assert listed[0] == 0
    assert {t["id"]: t["status"] for t in json.loads(listed[1])}[template.id] == "ready"
    assert on_template[:2] == (0, "built\nyes\n")
    assert template.id in table[1] and table[1].startswith("ID")

    [removed] = run_all([*CLI, "template", "rm", template.id], env=env)
    [again] = run_all([*CLI, "template", "ls", "--json"], env=env)
    assert removed[:2] == (0, f"deleted {template.id}\n")
    assert template.id not in again[1]
    for leftover in client.templates():
        client.delete_template(leftover.id)


def test_run_fork_from_a_prepared_sandbox(env: dict[str, str], box: Lease) -> None:
    box.write_file("/workspace/prepared.txt", b"prepared once\n")
    box.pause()
    assert box.id is not None
    forked, refused = run_all(
        [*CLI, "run", "--fork-from", box.id, "--", "cat prepared.txt"],
        [*CLI, "run", "--fork-from", box.id, "--shape", "s-1vcpu-1gb", "--", "true"],
        env=env,
    )
    assert forked[:2] == (0, "prepared once\n")
    assert refused[0] == 2 and "--fork-from takes its source's shape" in refused[2]
    assert refused[2].splitlines()[1] == "see `createos-sync run --help`"
    assert box.info().status == "paused"


def test_template_usage_errors_are_one_line_and_a_pointer_to_help(
    emulator: Emulator, env: dict[str, str], tmp_path: Path
) -> None:
    emulator.clear_request_log()
    (tmp_path / "binary").write_bytes(b"\xff\xfe")
    (tmp_path / "Dockerfile").write_text("FROM ubuntu:24.04\n")
    outcomes = run_all(
        [*CLI, "template", "build", "x", "-f", str(tmp_path / "missing")],
        [*CLI, "template", "build", "x", "-f", str(tmp_path / "binary")],
        [*CLI, "template", "build", " ", "-f", str(tmp_path / "Dockerfile")],
        [*CLI, "template", "build", "x", "--bogus"],
        env=env,
    )
    for status, out, err in outcomes:
        assert (status, out) == (2, ""), err
        first, hint = err.splitlines()
        assert first.startswith("createos-sync: error: ") and err.count("\n") == 2, err
        assert hint.startswith("see `createos-sync template") and hint.endswith(" --help`"), err
    assert emulator.request_log == []  # all found before any request
