"""File transfer over the wire: request shapes, retries and rewinds, progress, atomic
downloads, and directory archives whose every entry is checked before extraction."""

from __future__ import annotations

import io
import json
import os
import stat
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

import createos_sync as cs
from createos_sync import _files as files
from createos_sync._files import _archive
from createos_sync.errors import UnsafeArchiveError

from .wire import API, SANDBOX, Chunked, Service, exit_frame

FILES = f"/sandboxes/{SANDBOX}/files"
PAYLOAD = bytes(range(256)) * 40  # 10 KiB, every byte value


def query_path(call: Any) -> str:
    return parse_qs(urlsplit(call.request.url).query)["path"][0]


def exec_ok(service: Service) -> None:
    service.add(
        "POST",
        f"/sandboxes/{SANDBOX}/exec",
        body={"result": {"exit_code": 0, "stdout": "", "stderr": ""}, "exec_ms": 1},
    )


def listing(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*"))


class OneWay(io.RawIOBase):
    """A binary stream that cannot be rewound (a pipe, a socket)."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


# --- single files: request shapes --------------------------------------------


@pytest.mark.parametrize(
    ("data", "sent"),
    [
        (PAYLOAD, PAYLOAD),
        (bytearray(PAYLOAD), PAYLOAD),
        (memoryview(PAYLOAD), PAYLOAD),
        ("☃ snow\n", "☃ snow\n".encode()),
        (io.BytesIO(PAYLOAD), PAYLOAD),
    ],
)
def test_write_file_is_one_put_of_octet_stream(
    box: Any, service: Service, data: Any, sent: bytes
) -> None:
    service.add("PUT", FILES, body={"path": "/workspace/a b", "size": len(sent)})

    box.write_file("/workspace/a b", data)

    (call,) = service.calls("PUT")
    assert query_path(call) == "/workspace/a b"
    assert call.request.body == sent
    assert call.request.headers["Content-Type"] == "application/octet-stream"
    assert call.request.headers["Content-Length"] == str(len(sent))


def test_empty_data_is_an_empty_body_not_a_chunked_one(box: Any, service: Service) -> None:
    service.add("PUT", FILES, body={})
    box.write_file("/workspace/empty", io.BytesIO(b""))
    (call,) = service.calls("PUT")
    assert call.request.headers["Content-Length"] == "0"
    assert "Transfer-Encoding" not in call.request.headers


def test_a_seekable_file_is_sent_from_its_current_position(box: Any, service: Service) -> None:
    service.add("PUT", FILES, body={})
    source = io.BytesIO(b"skip:" + PAYLOAD)
    source.read(5)
    box.write_file("/workspace/a", source)
    assert service.calls("PUT")[0].request.body == PAYLOAD


def test_read_file_is_one_get(box: Any, service: Service) -> None:
    service.add("GET", FILES, body=PAYLOAD, content_type="application/octet-stream")
    assert box.read_file("/workspace/a") == PAYLOAD
    (call,) = service.calls("GET", "/files")
    assert query_path(call) == "/workspace/a"


def test_upload_streams_the_local_file(box: Any, service: Service, tmp_path: Path) -> None:
    local = tmp_path / "in.bin"
    local.write_bytes(PAYLOAD)
    service.add("PUT", FILES, body={})
    box.upload(local, "/workspace/in.bin")
    (call,) = service.calls("PUT")
    assert call.request.body == PAYLOAD
    assert call.request.headers["Content-Length"] == str(len(PAYLOAD))


def test_download_writes_the_target_and_nothing_else(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.add("GET", FILES, body=PAYLOAD)
    box.download("/workspace/a", tmp_path / "out.bin")
    assert (tmp_path / "out.bin").read_bytes() == PAYLOAD
    assert listing(tmp_path) == ["out.bin"]
    # A new file gets the usual permissions (the umask's), not a temporary file's 0o600.
    umask = os.umask(0o022)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "out.bin").stat().st_mode) == 0o666 & ~umask


# --- validation before any request --------------------------------------------


def bad_calls(tmp_path: Path) -> list[tuple[Callable[[Any], Any], type[Exception], str]]:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_bytes(b"x")
    (tmp_path / "file").write_bytes(b"x")
    return [
        (
            lambda b: b.write_file("workspace/rel", b"x"),
            ValueError,
            r"a remote path must be absolute \(start with /\)",
        ),
        (
            lambda b: b.write_file("/workspace/nul\0", b"x"),
            ValueError,
            "a remote path must not contain NUL",
        ),
        (
            lambda b: b.write_file(b"/workspace/bytes", b"x"),
            TypeError,
            "a remote path must be a str",
        ),
        (
            lambda b: b.write_file("/workspace/a", 42),
            TypeError,
            "data must be bytes, str or a binary file object",
        ),
        (
            lambda b: b.write_file("/workspace/a", io.StringIO("text")),
            TypeError,
            r"data must be a binary file object \(open it with 'rb'\)",
        ),
        (
            lambda b: b.write_file("/workspace/a", b"x", progress="yes"),
            TypeError,
            r"progress must be True \(a ready-made bar\), False, None, or a callable",
        ),
        (
            lambda b: b.read_file("relative"),
            ValueError,
            r"a remote path must be absolute \(start with /\)",
        ),
        (
            lambda b: b.upload(tmp_path / "file", "rel"),
            ValueError,
            r"a remote path must be absolute \(start with /\)",
        ),
        (
            lambda b: b.upload(tmp_path / "missing", "/workspace/a"),
            FileNotFoundError,
            r"No such file or directory: .*missing",
        ),
        (
            lambda b: b.download("/workspace/\0", tmp_path / "o"),
            ValueError,
            "a remote path must not contain NUL",
        ),
        (lambda b: b.download("/workspace/a", tmp_path), IsADirectoryError, "is a directory"),
        (
            lambda b: b.download("/workspace/a", tmp_path / "no" / "dir"),
            FileNotFoundError,
            r"the parent directory of .*no.dir does not exist",
        ),
        (
            lambda b: b.upload_dir(tmp_path, "tmp/x"),
            ValueError,
            r"a remote path must be absolute \(start with /\)",
        ),
        (
            lambda b: b.upload_dir(tmp_path / "file", "/workspace/d"),
            NotADirectoryError,
            "file is not a directory",
        ),
        (
            lambda b: b.download_dir("rel", tmp_path / "new"),
            ValueError,
            r"a remote path must be absolute \(start with /\)",
        ),
        (
            lambda b: b.download_dir("/workspace/d", tmp_path / "full"),
            FileExistsError,
            "full exists and is not empty",
        ),
        (
            lambda b: b.download_dir("/workspace/d", tmp_path / "file"),
            FileExistsError,
            "file exists and is not a directory",
        ),
        (
            lambda b: b.download_dir("/workspace/d", tmp_path / "no" / "d"),
            FileNotFoundError,
            r"the parent directory of .*d does not exist",
        ),
    ]


@pytest.mark.parametrize("case", range(18))
def test_invalid_arguments_raise_before_any_request(
    box: Any, service: Service, tmp_path: Path, case: int
) -> None:
    cases = bad_calls(tmp_path)
    assert len(cases) == 18
    call, error, message = cases[case]
    before = len(service.mock.calls)
    with pytest.raises(error, match=message):
        call(box)
    assert len(service.mock.calls) == before
    assert sorted(os.listdir(tmp_path)) == ["file", "full"]


# --- retries: rewind what can be rewound, never replay a stream --------------


@pytest.mark.parametrize("kind", ["bytes", "str", "file", "local file"])
def test_a_failed_put_is_retried_with_the_whole_body(
    box: Any, service: Service, sleeps: list[float], tmp_path: Path, kind: str
) -> None:
    service.add("PUT", FILES, 503)
    service.add("PUT", FILES, body=requests.ConnectionError("dropped"))
    service.add("PUT", FILES, body={})
    text = "\u00fc" * 3000
    expected = text.encode() if kind == "str" else PAYLOAD
    progress: list[tuple[int, int | None]] = []
    if kind == "local file":
        (tmp_path / "f").write_bytes(PAYLOAD)
        box.upload(tmp_path / "f", "/workspace/a", progress=lambda d, t: progress.append((d, t)))
    else:
        data: Any = {"bytes": PAYLOAD, "str": text, "file": io.BytesIO(PAYLOAD)}[kind]
        box.write_file("/workspace/a", data, progress=lambda d, t: progress.append((d, t)))

    bodies = [c.request.body for c in service.calls("PUT")]
    assert bodies == [expected] * 3
    assert len(sleeps) == 2
    # Each attempt starts the count again; the last call reports the whole body.
    assert progress.count((0, len(expected))) == 3
    assert progress[-1] == (len(expected), len(expected))


def test_a_stream_that_cannot_be_rewound_is_sent_once(box: Any, service: Service) -> None:
    received: list[bytes] = []

    def unavailable(request: Any) -> tuple[int, dict[str, str], str]:
        received.append(b"".join(request.body))  # read it, as a server would
        return 503, {}, json.dumps({"status": "error", "message": "busy"})

    service.mock.add_callback("PUT", API + FILES, callback=unavailable)
    progress: list[tuple[int, int | None]] = []
    with pytest.raises(cs.CreateosApiError, match="HTTP 503 during file transfer") as caught:
        box.write_file(
            "/workspace/a", OneWay(PAYLOAD), progress=lambda d, t: progress.append((d, t))
        )

    assert caught.value.status == 503
    assert received == [PAYLOAD]
    assert len(service.calls("PUT")) == 1
    assert service.calls("PUT")[0].request.headers["Transfer-Encoding"] == "chunked"
    assert progress[0] == (0, None)  # size unknown; no final call for a failed transfer


# --- progress --------------------------------------------------------------------


def test_meter_reports_at_most_ten_times_a_second_plus_first_and_last() -> None:
    now = [0.0]
    calls: list[tuple[int, int | None]] = []
    meter = files.Meter(lambda d, t: calls.append((d, t)), clock=lambda: now[0])
    meter.start(1000)
    for _ in range(100):  # 100 chunks over 0.5 s
        now[0] += 0.005
        meter.advance(10)
    meter.finish()
    assert calls[0] == (0, 1000) and calls[-1] == (1000, 1000)
    assert 5 <= len(calls) <= 7
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_meter_without_callback_does_nothing() -> None:
    meter = files.Meter(None, clock=lambda: pytest.fail("the clock is not read"))
    meter.start(None)
    meter.advance(5)
    meter.finish()
    assert meter.done == 5


def test_download_progress_knows_the_total(box: Any, service: Service, tmp_path: Path) -> None:
    service.add("GET", FILES, body=PAYLOAD, auto_calculate_content_length=True)
    progress: list[tuple[int, int | None]] = []
    box.download("/workspace/a", tmp_path / "o", progress=lambda d, t: progress.append((d, t)))
    assert progress[0] == (0, len(PAYLOAD))
    assert progress[-1] == (len(PAYLOAD), len(PAYLOAD))


# --- downloads are atomic ------------------------------------------------------


def broken(first: bytes, error: BaseException) -> io.BufferedReader:
    return io.BufferedReader(Chunked([first], error))


def test_a_stream_broken_midway_is_fetched_again_from_the_start(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.add("GET", FILES, body=broken(PAYLOAD[:4000], ConnectionResetError("reset")))
    service.add("GET", FILES, body=PAYLOAD)
    box.download("/workspace/a", tmp_path / "o")
    assert (tmp_path / "o").read_bytes() == PAYLOAD  # the partial first attempt was discarded
    service.add("GET", FILES, body=broken(PAYLOAD[:10], ConnectionResetError("reset")))
    service.add("GET", FILES, body=PAYLOAD)
    assert box.read_file("/workspace/a") == PAYLOAD


def test_a_download_that_keeps_breaking_leaves_the_old_file_untouched(
    box: Any, service: Service, tmp_path: Path
) -> None:
    (tmp_path / "o").write_bytes(b"old contents")
    for _ in range(4):  # the first attempt and max_retries=3 more
        service.add("GET", FILES, body=broken(PAYLOAD[:4000], ConnectionResetError("reset")))
    with pytest.raises(cs.CreateosApiError) as caught:
        box.download("/workspace/a", tmp_path / "o")
    assert caught.value.status is None
    assert "stream broke" in str(caught.value)
    assert (tmp_path / "o").read_bytes() == b"old contents"
    assert listing(tmp_path) == ["o"]


def test_ctrl_c_during_a_download_leaves_nothing_behind(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.add("GET", FILES, body=broken(PAYLOAD[:4000], KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        box.download("/workspace/a", tmp_path / "o")
    assert listing(tmp_path) == []


def test_a_refused_download_is_not_retried(box: Any, service: Service, tmp_path: Path) -> None:
    service.add("GET", FILES, 404)
    with pytest.raises(cs.CreateosApiError, match="no such file or directory in the") as caught:
        box.download("/workspace/missing", tmp_path / "o")
    assert caught.value.status == 404
    assert len(service.calls("GET", "/files")) == 1
    assert listing(tmp_path) == []


# --- directory archives: what is refused -----------------------------------------


def member(name: str, kind: bytes = tarfile.REGTYPE, **attrs: Any) -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.type = kind
    data = attrs.pop("data", b"")
    info.size = len(data) if kind == tarfile.REGTYPE else 0
    info.mode = attrs.pop("mode", 0o755 if kind == tarfile.DIRTYPE else 0o644)
    for key, value in attrs.items():
        setattr(info, key, value)
    return info, data


def tar_of(*members: tuple[tarfile.TarInfo, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return buffer.getvalue()


BENIGN = member("./fine.txt", data=b"harmless")

# case -> (what the refusal says, the entries after a benign one)
MALICIOUS: dict[str, tuple[str, list[tuple[tarfile.TarInfo, bytes]]]] = {
    "absolute name": ("is an absolute path", [member("/etc/evil")]),
    "dot-dot": ("contains '..'", [member("./../evil")]),
    "dot-dot deep": ("contains '..'", [member("a/b/../../../evil")]),
    "absolute symlink": (
        "symlink to the absolute path",
        [member("link", tarfile.SYMTYPE, linkname="/etc/passwd")],
    ),
    "escaping symlink": (
        "is a symlink to '.*', outside the extracted tree",
        [member("link", tarfile.SYMTYPE, linkname="../outside")],
    ),
    "symlink escaping deep": (
        "is a symlink to '.*', outside the extracted tree",
        [member("a", tarfile.DIRTYPE), member("a/link", tarfile.SYMTYPE, linkname="../../x")],
    ),
    # Lexically sub/up/../x is sub/x; but sub/up is the root, so up/.. is above it.
    "escape through another symlink": (
        "is a symlink to '.*', outside the extracted tree",
        [
            member("sub", tarfile.DIRTYPE),
            member("sub/up", tarfile.SYMTYPE, linkname=".."),
            member("sub/link", tarfile.SYMTYPE, linkname="up/../x"),
        ],
    ),
    "escape through a later symlink": (
        "is a symlink to '.*', outside the extracted tree",
        [
            member("link", tarfile.SYMTYPE, linkname="root/../evil"),
            member("root", tarfile.SYMTYPE, linkname="."),
        ],
    ),
    "symlink loop": (
        "symlink loop",
        [member("a", tarfile.SYMTYPE, linkname="b"), member("b", tarfile.SYMTYPE, linkname="a")],
    ),
    "empty symlink target": ("invalid target", [member("link", tarfile.SYMTYPE, linkname="")]),
    "entry beneath a symlink": (
        "lies beneath the symlink",
        [
            member("sub", tarfile.DIRTYPE),
            member("d", tarfile.SYMTYPE, linkname="sub"),
            member("d/file", data=b"through the link"),
        ],
    ),
    "hard link outside": (
        "contains '..'",
        [member("hard", tarfile.LNKTYPE, linkname="../etc/passwd")],
    ),
    "absolute hard link": (
        "is an absolute path",
        [member("hard", tarfile.LNKTYPE, linkname="/etc/passwd")],
    ),
    "hard link to a later entry": (
        "not an earlier file",
        [member("hard", tarfile.LNKTYPE, linkname="late"), member("late", data=b"x")],
    ),
    "hard link to a symlink": (
        "not an earlier file",
        [
            member("s", tarfile.SYMTYPE, linkname="fine.txt"),
            member("hard", tarfile.LNKTYPE, linkname="s"),
        ],
    ),
    "hard link to a directory": (
        "not an earlier file",
        [member("d", tarfile.DIRTYPE), member("hard", tarfile.LNKTYPE, linkname="d")],
    ),
    "character device": ("is a device", [member("tty", tarfile.CHRTYPE, devmajor=5)]),
    "block device": ("is a device", [member("disk", tarfile.BLKTYPE, devmajor=8)]),
    "fifo": ("is a FIFO", [member("pipe", tarfile.FIFOTYPE)]),
    "duplicate": ("appears twice", [member("twice", data=b"1"), member("./twice", data=b"2")]),
    "root that is a file": ("is not a directory", [member("./", data=b"")]),
}


@pytest.mark.parametrize("case", sorted(MALICIOUS))
def test_a_malicious_archive_is_refused_with_nothing_extracted(tmp_path: Path, case: str) -> None:
    reason, entries = MALICIOUS[case]
    archive = tar_of(BENIGN, *entries)
    target = tmp_path / "out"
    with pytest.raises(UnsafeArchiveError, match=reason) as caught:
        _archive.unpack(io.BytesIO(archive), target)
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, cs.CreateosError)
    assert listing(tmp_path) == []  # not even fine.txt, and no staging directory


def test_links_are_also_resolved_on_the_real_file_system(tmp_path: Path) -> None:
    # What a case-insensitive file system could alias past the archive check.
    (tmp_path / "tree").mkdir()
    os.symlink("../..", tmp_path / "tree" / "up")
    members = [_archive.Member(member("up", tarfile.SYMTYPE, linkname="../..")[0], "up")]
    with pytest.raises(UnsafeArchiveError, match="on this file system"):
        _archive._check_written_links(members, str(tmp_path / "tree"))


def test_a_damaged_archive_is_refused(tmp_path: Path) -> None:
    archive = tar_of(member("big", data=b"x" * 5000))[:2048]
    with pytest.raises(UnsafeArchiveError, match="damaged"):
        _archive.unpack(io.BytesIO(archive), tmp_path / "out")
    assert listing(tmp_path) == []


def test_a_safe_archive_is_extracted_whole(tmp_path: Path) -> None:
    archive = tar_of(
        member("./", tarfile.DIRTYPE),
        member("./a/b", tarfile.DIRTYPE, mode=0o555),  # read-only, yet filled
        member("./a/b/file", data=b"deep", mode=0o4755),  # set-uid dropped
        member("./a/b/up", tarfile.SYMTYPE, linkname="../../top"),
        member("./top", data=b"top"),
        member("./hard", tarfile.LNKTYPE, linkname="./top"),
        member("./here", tarfile.SYMTYPE, linkname="a/b/.."),
        member("./snow ☃", data=b""),
    )
    target = tmp_path / "out"
    target.mkdir()  # an empty directory is replaced
    _archive.unpack(io.BytesIO(archive), target)

    assert listing(tmp_path) == [
        "out", "out/a", "out/a/b", "out/a/b/file", "out/a/b/up",
        "out/hard", "out/here", "out/snow ☃", "out/top",
    ]  # fmt: skip
    assert (target / "a/b/up").read_bytes() == b"top"
    assert os.readlink(target / "a/b/up") == "../../top"
    assert (target / "hard").stat().st_ino == (target / "top").stat().st_ino
    assert stat.S_IMODE((target / "a/b/file").stat().st_mode) == 0o755
    assert stat.S_IMODE((target / "a/b").stat().st_mode) == 0o755  # owner can always write
    assert (target / "snow ☃").read_bytes() == b""


def test_pack_stores_links_as_links_and_skips_special_files(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f").write_bytes(b"data")
    (tmp_path / "secret").write_bytes(b"outside the tree")
    os.symlink("../secret", tree / "sub" / "out")
    os.symlink(tmp_path, tree / "dirlink")  # a link to a directory: never descended
    os.mkfifo(tree / "pipe")
    os.link(tree / "sub" / "f", tree / "twin")
    archive = io.BytesIO()
    _archive.pack(tree, archive)
    archive.seek(0)
    with tarfile.open(fileobj=archive) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert sorted(members) == ["dirlink", "sub", "sub/f", "sub/out", "twin"]
    assert members["sub/out"].issym() and members["sub/out"].linkname == "../secret"
    assert members["dirlink"].issym()
    assert members["twin"].islnk() and members["twin"].linkname == "sub/f"
    assert {m.uid for m in members.values()} == {0} and members["sub/f"].uname == ""


# --- directory transfers over the wire -------------------------------------------


def test_upload_dir_puts_one_archive_and_extracts_it_with_one_run(
    box: Any, service: Service, tmp_path: Path
) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"data")
    service.add("PUT", FILES, body={})
    service.run(exit_frame(0))
    before = len(service.mock.calls)

    box.upload_dir(tmp_path, "/workspace/dest dir")

    assert len(service.mock.calls) - before == 4
    (put,) = service.calls("PUT")
    scratch = query_path(put)
    assert scratch.startswith("/tmp/.createos-sync-upload-") and scratch.endswith(".tar")
    with tarfile.open(fileobj=io.BytesIO(put.request.body)) as tar:
        assert tar.getnames() == ["d", "d/f"]
    wrapper = service.process_bodies()[0]["args"][1]
    assert "tar -x -f" in wrapper and scratch in wrapper and "'/workspace/dest dir'" in wrapper
    assert "rm -f" in wrapper  # the run removes the scratch file itself
    assert not service.calls("POST", "/exec")


def test_a_failed_extraction_removes_the_scratch_file(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.add("PUT", FILES, body={})
    service.run(exit_frame(2))
    exec_ok(service)
    with pytest.raises(cs.CommandFailed, match="extracting into /workspace/d failed"):
        box.upload_dir(tmp_path, "/workspace/d")
    (rm,) = service.calls("POST", "/exec")
    body = json.loads(rm.request.body)
    assert body == {"cmd": "/bin/rm", "args": ["-f", "--", query_path(service.calls("PUT")[0])]}


def test_a_failed_archive_upload_removes_the_scratch_file(
    box: Any, service: Service, tmp_path: Path
) -> None:
    for _ in range(4):
        service.add("PUT", FILES, 503)
    exec_ok(service)
    with pytest.raises(cs.CreateosApiError, match="HTTP 503 during file transfer"):
        box.upload_dir(tmp_path, "/workspace/d")
    (rm,) = service.calls("POST", "/exec")
    assert json.loads(rm.request.body)["args"][-1] == query_path(service.calls("PUT")[0])


def test_download_dir_costs_five_requests_and_removes_the_scratch_file(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.run(exit_frame(0))
    service.add("GET", FILES, body=tar_of(member("./", tarfile.DIRTYPE), BENIGN))
    exec_ok(service)
    before = len(service.mock.calls)

    box.download_dir("/workspace/src", tmp_path / "out")

    assert len(service.mock.calls) - before == 5
    scratch = query_path(service.calls("GET", "/files")[0])
    assert scratch.startswith("/tmp/.createos-sync-download-")
    wrapper = service.process_bodies()[0]["args"][1]
    assert "exec tar -c -f " in wrapper and f"sh {scratch} /workspace/src" in wrapper
    (rm,) = service.calls("POST", "/exec")
    assert json.loads(rm.request.body)["args"] == ["-f", "--", scratch]
    assert (tmp_path / "out" / "fine.txt").read_bytes() == b"harmless"
    assert listing(tmp_path) == ["out", "out/fine.txt"]


def test_download_dir_refuses_a_malicious_archive_from_the_sandbox(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.run(exit_frame(0))
    evil = tar_of(BENIGN, member("link", tarfile.SYMTYPE, linkname="/home"))
    service.add("GET", FILES, body=evil)
    exec_ok(service)
    with pytest.raises(UnsafeArchiveError, match="'link' is a symlink to the absolute path"):
        box.download_dir("/workspace/src", tmp_path / "out")
    assert len(service.calls("POST", "/exec")) == 1
    assert listing(tmp_path) == []


def test_download_dir_when_tar_fails_still_removes_the_scratch_file(
    box: Any, service: Service, tmp_path: Path
) -> None:
    service.run(exit_frame(2))
    exec_ok(service)
    with pytest.raises(cs.CommandFailed, match="archiving /workspace/nope failed"):
        box.download_dir("/workspace/nope", tmp_path / "out")
    assert len(service.calls("POST", "/exec")) == 1
    assert not service.calls("GET", "/files")
    assert listing(tmp_path) == []


def test_a_scratch_file_that_cannot_be_removed_is_reported(
    box: Any, service: Service, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    service.run(exit_frame(2))
    service.add("POST", f"/sandboxes/{SANDBOX}/exec", 400)
    with pytest.raises(cs.CommandFailed, match="archiving /workspace/nope failed") as caught:
        box.download_dir("/workspace/nope", tmp_path / "out")
    notes = getattr(caught.value, "__notes__", [])
    assert any("could not be removed" in note for note in notes)
    assert "could not be removed" in caplog.text
