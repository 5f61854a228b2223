"""The files API: path mapping, escapes refused, streamed byte-exact transfers."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .helpers import Api


def files(sandbox_id: str) -> str:
    return f"/v1/sandboxes/{sandbox_id}/files"


def test_five_mib_round_trip_is_byte_exact(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    payload = os.urandom(5 << 20)
    put = any_api.call(
        "PUT",
        files(sandbox_id),
        params={"path": "/workspace/d/e/blob.bin"},
        data=payload,
        headers={"Content-Type": "application/octet-stream"},
    )
    assert put.status_code == 200, put.text
    got = any_api.call("GET", files(sandbox_id), params={"path": "/workspace/d/e/blob.bin"})
    assert got.status_code == 200
    assert got.headers["Content-Type"] == "application/octet-stream"
    assert got.content == payload
    assert any_api.emu.sandbox_path(sandbox_id, "/workspace/d/e/blob.bin").read_bytes() == payload


def test_chunked_upload_and_all_three_trees(api: Api) -> None:
    sandbox_id = api.sandbox()

    def body() -> Iterator[bytes]:
        for i in range(50):
            yield bytes([i]) * 10_000

    for path in ("/workspace/w", "/tmp/t", "/home/user/.config/h"):
        assert api.call("PUT", files(sandbox_id), params={"path": path}, data=body()).ok
        assert api.call("GET", files(sandbox_id), params={"path": path}).content == b"".join(body())
        assert api.emu.sandbox_path(sandbox_id, path).is_file()


def test_files_written_are_seen_by_commands(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    assert any_api.call(
        "PUT", files(sandbox_id), params={"path": "/workspace/in.txt"}, data=b"from the api"
    ).ok
    result = any_api.data(
        "POST", f"/v1/sandboxes/{sandbox_id}/exec", json={"cmd": "cat", "args": ["in.txt"]}
    )["result"]
    assert result == {"exit_code": 0, "stdout": "from the api", "stderr": ""}


def test_missing_file_is_404(api: Api) -> None:
    sandbox_id = api.sandbox()
    response = api.call("GET", files(sandbox_id), params={"path": "/workspace/nope"})
    assert response.status_code == 404
    assert response.json()["status"] == "fail"


@pytest.mark.parametrize(
    ("path", "status"),
    [
        ("workspace/relative", 400),
        ("/workspace/../../etc/passwd", 400),
        ("/workspace/a/../../tmp/x", 400),
        ("/workspace/nul\0byte", 400),
        ("/proc/self/environ", 403),  # mounted afresh for each command: not the sandbox's
        ("/dev/null", 403),
        ("", 400),
    ],
)
def test_paths_outside_the_storage_are_refused(api: Api, path: str, status: int) -> None:
    sandbox_id = api.sandbox()
    for method in ("GET", "PUT"):
        response = api.call(method, files(sandbox_id), params={"path": path}, data=b"x")
        assert response.status_code == status, (method, path, response.text)
        assert response.json()["status"] == "fail"


def test_symlinks_pointing_outside_are_refused(api: Api, tmp_path: os.PathLike[str]) -> None:
    sandbox_id = api.sandbox()
    secret = os.path.join(tmp_path, "secret")
    with open(secret, "w") as f:
        f.write("host secret")
    workspace = api.emu.sandbox_path(sandbox_id, "/workspace")
    os.symlink(secret, workspace / "file-link")
    os.symlink(tmp_path, workspace / "dir-link")
    os.symlink("inside.txt", workspace / "inner-link")
    (workspace / "inside.txt").write_text("inside")
    for path in ("/workspace/file-link", "/workspace/dir-link/secret"):
        assert api.call("GET", files(sandbox_id), params={"path": path}).status_code == 403
        assert (
            api.call(
                "PUT", files(sandbox_id), params={"path": path}, data=b"overwritten"
            ).status_code
            == 403
        )
    with open(secret) as f:
        assert f.read() == "host secret"
    inner = api.call("GET", files(sandbox_id), params={"path": "/workspace/inner-link"})
    assert inner.content == b"inside"


def test_files_of_another_sandbox_are_apart(api: Api) -> None:
    first, second = api.sandbox(), api.sandbox()
    assert api.call("PUT", files(first), params={"path": "/workspace/f"}, data=b"one").ok
    assert api.call("GET", files(second), params={"path": "/workspace/f"}).status_code == 404


def test_directory_paths_are_refused(api: Api) -> None:
    sandbox_id = api.sandbox()
    assert api.call("PUT", files(sandbox_id), params={"path": "/workspace/d/f"}, data=b"x").ok
    assert api.call("GET", files(sandbox_id), params={"path": "/workspace/d"}).status_code == 400
    put = api.call("PUT", files(sandbox_id), params={"path": "/workspace/d"}, data=b"x")
    assert put.status_code == 400
