"""File transfer against the emulator: byte-exact round trips, retries with real faults,
directory trees up and down, request budgets, and no scratch file left behind."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync import Lease
from createos_sync.emulator import Emulator, Fault
from createos_sync.errors import UnsafeArchiveError

from .helpers import FAST, operations, own_emulator


def scratch_files(emulator: Emulator, box: Lease) -> list[str]:
    assert box.id is not None
    found = [p.name for p in emulator.sandbox_path(box.id, "/tmp").iterdir()]
    return [name for name in found if not name.startswith(".createos_sync_session.")]


def file_operations(emulator: Emulator, box: Lease) -> list[str]:
    """The operations of the requests made since the lease opened, without status polls."""
    return [op for op, _ in operations(emulator, box.id) if op != "sandbox.get"]


def snapshot(root: Path) -> dict[str, tuple[str, str]]:
    """Every entry under ``root``: (kind, content hash or link target), by relative path."""
    tree: dict[str, tuple[str, str]] = {}
    for directory, dirs, names in os.walk(root):
        for name in dirs + names:
            path = Path(directory) / name
            rel = str(path.relative_to(root))
            if path.is_symlink():
                tree[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                tree[rel] = ("dir", "")
            else:
                tree[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return tree


# --- single files --------------------------------------------------------------


def test_five_mib_binary_round_trip_costs_one_request_each_way(
    emulator: Emulator, box: Lease
) -> None:
    payload = os.urandom(5 << 20)
    emulator.clear_request_log()

    box.write_file("/workspace/d/blob.bin", payload)
    assert box.read_file("/workspace/d/blob.bin") == payload

    assert file_operations(emulator, box) == ["file.write", "file.read"]


def test_twenty_mb_upload_and_download_by_checksum(box: Lease, tmp_path: Path) -> None:
    chunk = os.urandom(1 << 20)
    source = tmp_path / "big.bin"
    with open(source, "wb") as f:
        for i in range(20):
            f.write(bytes([i]) + chunk[1:])
    sent: list[tuple[int, int | None]] = []
    received: list[tuple[int, int | None]] = []

    box.upload(source, "/workspace/big.bin", progress=lambda d, t: sent.append((d, t)))
    box.download(
        "/workspace/big.bin", tmp_path / "back.bin", progress=lambda *a: received.append(a)
    )

    size = source.stat().st_size
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == digest
    assert sent[0] == (0, size) and sent[-1] == (size, size)
    assert received[0] == (0, size) and received[-1] == (size, size)
    assert sorted(os.listdir(tmp_path)) == ["back.bin", "big.bin"]


def test_text_and_empty_files(box: Lease) -> None:
    box.write_file("/workspace/snow ☃.txt", "ünïcødé ☃\n")
    box.write_file("/home/user/empty", b"")
    assert box.read_file("/workspace/snow ☃.txt").decode() == "ünïcødé ☃\n"
    assert box.read_file("/home/user/empty") == b""


def test_a_failed_upload_of_a_file_is_retried_from_its_start(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    payload = os.urandom(300_000)
    (tmp_path / "f").write_bytes(payload)
    emulator.faults.add(Fault("file.write", status=503))
    emulator.clear_request_log()

    box.upload(tmp_path / "f", "/workspace/f")

    assert box.read_file("/workspace/f") == payload
    assert file_operations(emulator, box) == ["file.write", "file.write", "file.read"]


def test_a_pipe_is_sent_once_and_never_replayed(emulator: Emulator, box: Lease) -> None:
    read_end, write_end = os.pipe()
    os.write(write_end, b"x" * 1000)  # well under the pipe's buffer: no writer thread needed
    os.close(write_end)
    emulator.faults.add(Fault("file.write", status=503))
    emulator.clear_request_log()

    with (
        open(read_end, "rb") as pipe,
        pytest.raises(cs.CreateosApiError, match="HTTP 503 during file transfer"),
    ):
        box.write_file("/workspace/p", pipe)

    assert file_operations(emulator, box) == ["file.write"]


def test_a_dropped_download_is_retried(emulator: Emulator, box: Lease, tmp_path: Path) -> None:
    box.write_file("/workspace/f", b"contents")
    emulator.faults.add(Fault("file.read", drop=True))
    box.download("/workspace/f", tmp_path / "f")
    assert (tmp_path / "f").read_bytes() == b"contents"


def test_a_missing_remote_file_leaves_nothing_locally(box: Lease, tmp_path: Path) -> None:
    with pytest.raises(
        cs.CreateosApiError, match="no such file or directory in the sandbox"
    ) as caught:
        box.download("/workspace/missing", tmp_path / "f")
    assert caught.value.status == 404
    assert os.listdir(tmp_path) == []


# --- directories -------------------------------------------------------------------


def make_tree(root: Path) -> None:
    (root / "nested" / "deeper" / "deepest").mkdir(parents=True)
    (root / "empty dir").mkdir()
    (root / "ünïcødé ☃.txt").write_text("snow ☃\n", encoding="utf-8")
    (root / "empty").write_bytes(b"")
    (root / "nested" / "data.bin").write_bytes(os.urandom(200_000))
    (root / "nested" / "deeper" / "deepest" / "leaf").write_bytes(b"leaf")
    script = root / "run.sh"
    script.write_text("#!/bin/sh\necho ran\n")
    script.chmod(0o755)
    os.symlink("nested/deeper/deepest/leaf", root / "link to leaf")
    os.symlink("../..", root / "nested" / "deeper" / "up")  # back to the root: inside
    (root / "nested" / ("long name ü " * 12)).write_bytes(b"past tar's 100-byte names")
    os.link(root / "nested" / "deeper" / "deepest" / "leaf", root / "hard link to leaf")


def test_a_tree_goes_up_and_comes_back_identical(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    make_tree(tmp_path / "src")
    emulator.clear_request_log()

    box.upload_dir(tmp_path / "src", "/workspace/project")

    assert file_operations(emulator, box) == [  # the lease's first command starts its session
        "file.write", "process.create", "process.connect", "process.input",
    ]  # fmt: skip
    assert box.run("/workspace/project/run.sh", check=True).stdout == "ran\n"
    assert box.run("cat '/workspace/project/link to leaf'").stdout == "leaf"
    emulator.clear_request_log()

    box.download_dir("/workspace/project", tmp_path / "back")

    assert file_operations(emulator, box) == ["process.input", "file.read", "exec"]
    assert snapshot(tmp_path / "back") == snapshot(tmp_path / "src")
    assert os.access(tmp_path / "back" / "run.sh", os.X_OK)
    back = tmp_path / "back"
    assert (back / "hard link to leaf").stat().st_ino == (back / "link to leaf").stat().st_ino
    assert scratch_files(emulator, box) == []
    assert sorted(os.listdir(tmp_path)) == ["back", "src"]


def test_upload_dir_merges_into_an_existing_directory(box: Lease, tmp_path: Path) -> None:
    box.write_file("/workspace/dest/kept", b"kept")
    box.write_file("/workspace/dest/replaced", b"old")
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "replaced").write_bytes(b"new")
    progress: list[tuple[int, int | None]] = []

    box.upload_dir(tmp_path / "src", "/workspace/dest", progress=lambda *a: progress.append(a))

    assert box.read_file("/workspace/dest/kept") == b"kept"
    assert box.read_file("/workspace/dest/replaced") == b"new"
    total = progress[-1][1]
    assert total and progress[-1] == (total, total)


def test_local_symlinks_are_uploaded_as_links_never_followed(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    (tmp_path / "private").mkdir()
    (tmp_path / "private" / "secret").write_bytes(b"never uploaded")
    (tmp_path / "src").mkdir()
    os.symlink(tmp_path / "private", tmp_path / "src" / "to private")
    os.mkfifo(tmp_path / "src" / "fifo")

    box.upload_dir(tmp_path / "src", "/workspace/up")

    assert box.id is not None
    uploaded = emulator.sandbox_path(box.id, "/workspace/up")
    assert sorted(os.listdir(uploaded)) == ["to private"]
    assert os.readlink(uploaded / "to private") == str(tmp_path / "private")
    assert b"never uploaded" not in box.run("grep -r . /workspace/up || true").stdout.encode()


def test_a_hostile_tree_in_the_sandbox_is_refused_with_nothing_extracted(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    box.run(
        "mkdir -p /workspace/evil && echo fine > /workspace/evil/a && "
        "ln -s ../../../../etc /workspace/evil/escape",
        check=True,
    )
    with pytest.raises(UnsafeArchiveError, match="escape"):
        box.download_dir("/workspace/evil", tmp_path / "out")
    assert os.listdir(tmp_path) == []
    assert scratch_files(emulator, box) == []


def test_a_missing_remote_directory_fails_cleanly(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError, match="/workspace/nope") as caught:
        box.download_dir("/workspace/nope", tmp_path / "out")
    assert isinstance(caught.value, cs.RemoteFileNotFoundError)
    assert caught.value.filename == "/workspace/nope"
    assert os.listdir(tmp_path) == []
    assert scratch_files(emulator, box) == []


def test_a_missing_remote_file_is_a_file_not_found_error_naming_it(
    box: Lease, tmp_path: Path
) -> None:
    for attempt in (
        lambda: box.read_file("/workspace/nope"),
        lambda: box.download("/workspace/nope", tmp_path / "copy"),
    ):
        with pytest.raises(
            FileNotFoundError, match="no such file or directory in the sandbox: /workspace/nope"
        ) as caught:
            attempt()
        error = caught.value
        assert isinstance(error, cs.RemoteFileNotFoundError) and error.status == 404
        assert error.filename == "/workspace/nope" and "/workspace/nope" in str(error)
        assert pickle.loads(pickle.dumps(error)).filename == "/workspace/nope"
    assert os.listdir(tmp_path) == []


def test_a_directory_transfer_interrupted_by_a_fault_removes_its_scratch_file(
    emulator: Emulator, box: Lease, tmp_path: Path
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "f").write_bytes(b"x")
    box.run("mkdir -p /workspace/d && echo hi > /workspace/d/f", check=True)
    emulator.faults.add(Fault("file.read", status=404))
    with pytest.raises(cs.CreateosApiError, match="HTTP 404 during file transfer"):
        box.download_dir("/workspace/d", tmp_path / "out")
    emulator.faults.clear()
    emulator.faults.add(Fault("process.input", status=400))  # the tar in the lease's session
    with pytest.raises(cs.CreateosApiError, match="HTTP 400 during process control"):
        box.upload_dir(tmp_path / "src", "/workspace/d2")
    assert scratch_files(emulator, box) == []
    assert sorted(os.listdir(tmp_path)) == ["src"]


def test_symlinks_leaving_the_remote_tree_name_the_entry(
    box: Lease, tmp_path: Path, emulator: Emulator
) -> None:
    box.run("mkdir -p /workspace/v/bin && ln -s /usr/bin/python3 /workspace/v/bin/py", check=True)
    with pytest.raises(UnsafeArchiveError, match="'bin/py' is a symlink to the absolute path"):
        box.download_dir("/workspace/v", tmp_path / "v")
    assert os.listdir(tmp_path) == []


def test_staged_stdin_without_isolation() -> None:
    """Without isolation the sandbox's /tmp is its TMPDIR: staged stdin is found there."""
    with (
        own_emulator(isolation="none") as emu,
        emu.client(requests_per_minute=FAST) as client,
        client.lease() as box,
    ):
        assert box.run("cat", stdin=b"hello").stdout == "hello"
