"""File transfer between this machine and a sandbox, streamed in constant memory.

Uploads of bytes, text and seekable files are retried like any idempotent
PUT (each attempt rewinds the file); a stream that cannot be rewound is sent
once and never replayed. A download that breaks midway starts again from
the beginning (up to the client's ``max_retries`` times). Local files are
written to a temporary file beside the target and renamed into place only
when complete, so no failure, Ctrl-C included, leaves a half-written file.

Directories travel as one tar archive through a scratch file in the
sandbox's ``/tmp``, packed and extracted by ``tar`` there and by
``createos_sync._files._archive`` here (see that module for what is refused).
Scratch files are removed afterwards, on failure too. A remote path that
does not exist raises ``RemoteFileNotFoundError`` (also a ``FileNotFoundError``)
naming it, for reads, downloads and directory downloads alike.

Request budget: ``write`` / ``upload`` 1 PUT, ``read`` / ``download`` 1 GET;
``upload_dir`` 4 (PUT, then a 3-request run that extracts and removes the
scratch file); ``download_dir`` 5 (a 3-request run that archives, GET,
one exec that removes the scratch file). A failed directory transfer costs
one more exec to remove the scratch file. Retries come on top.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from typing import IO, Any, BinaryIO

from .._sandboxes.box import Box
from .._wire import api as _api
from .._wire.deadline import Deadline
from .._wire.http import Body, Stream
from .._wire.retry import ReconnectBudget, Repeat
from ..config import new_beside
from ..errors import (
    CommandFailed,
    CreateosApiError,
    CreateosError,
    ProtocolError,
    RemoteFileNotFoundError,
    add_note,
)
from ..result import RunResult
from . import _archive, _progress

log = logging.getLogger("createos_sync.files")

FileData = bytes | bytearray | memoryview | str | BinaryIO
Progress = Callable[[int, "int | None"], object]
Run = Callable[[list[str]], RunResult[str]]

PROGRESS_INTERVAL = 0.1  # seconds: at most ten progress calls a second
UPLOAD_CHUNK = 256 * 1024
HOUSEKEEPING_OUTPUT = 64 * 1024  # what a housekeeping run keeps of tar's messages
# Extract, then remove the archive whatever tar's outcome: on success this
# saves the request that would otherwise remove the scratch file.
EXTRACT_SCRIPT = (
    'mkdir -p -- "$2" && tar -x -f "$1" -C "$2" --no-same-owner; '
    'status=$?; rm -f -- "$1"; exit "$status"'
)
# Archive the directory $2 into $1; a path that does not exist exits MISSING, not tar's 2.
ARCHIVE_SCRIPT = '[ -e "$2" ] || exit 44; exec tar -c -f "$1" -C "$2" .'
MISSING = 44


def check_remote_path(path: str) -> str:
    """A remote path must be an absolute ``str`` without NUL."""
    if not isinstance(path, str):
        raise TypeError("a remote path must be a str")
    if not path.startswith("/"):
        raise ValueError("a remote path must be absolute (start with /)")
    if "\0" in path:
        raise ValueError("a remote path must not contain NUL")
    return path


def check_progress(progress: object) -> None:
    if progress is not None and not isinstance(progress, bool) and not callable(progress):
        raise TypeError(
            "progress must be True (a ready-made bar), False, None, "
            "or a callable taking (done_bytes, total_bytes)"
        )


@contextlib.contextmanager
def metered(progress: Progress | bool | None, label: str) -> Iterator[Meter]:
    """A ``Meter`` for ``progress``: a callback, ``True`` for a ready-made display
    (see ``_progress``) labelled ``label`` and closed at the end, or nothing."""
    if progress is not True:
        yield Meter(progress or None)
        return
    shown = _progress.display(label)
    try:
        yield Meter(shown)
    except BaseException:
        shown.close(complete=False)
        raise
    shown.close()


def scratch_path(kind: str, suffix: str = "") -> str:
    """(inferred) A fresh name for a scratch file (staged stdin, archives) in the sandbox's /tmp."""
    return f"/tmp/.createos-sync-{kind}-{secrets.token_hex(8)}{suffix}"


class Meter:
    """Reports bytes moved to a ``progress(done, total)`` callback.

    Calls come at most every ``PROGRESS_INTERVAL`` seconds, plus one when a
    transfer (or a retry of it) starts and one when it ends; ``total`` is
    None when the size is not known in advance.
    """

    def __init__(
        self, progress: Progress | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._progress = progress
        self._clock = clock
        self.done = 0
        self.total: int | None = None
        self._last = 0.0

    @property
    def reporting(self) -> bool:
        """True when there is a callback to report to."""
        return self._progress is not None

    def start(self, total: int | None) -> None:
        self.done, self.total = 0, total
        self._report()

    def advance(self, count: int) -> None:
        self.done += count
        if self._progress is not None and self._clock() - self._last >= PROGRESS_INTERVAL:
            self._report()

    def finish(self) -> None:
        self._report()

    def _report(self) -> None:
        if self._progress is not None:
            self._last = self._clock()
            self._progress(self.done, self.total)


class _Reader:
    """A request body read from ``source``, at most ``length`` bytes, counted into ``meter``.

    ``__len__`` gives requests the Content-Length, so the body is streamed
    rather than sent chunked.
    """

    def __init__(self, source: IO[bytes], length: int, meter: Meter) -> None:
        self._source = source
        self._left = length
        self._meter = meter

    def __len__(self) -> int:
        return self._left

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > self._left:
            size = self._left
        chunk = self._source.read(size) if size else b""
        self._left -= len(chunk)
        self._meter.advance(len(chunk))
        return chunk

    def __iter__(self) -> Iterator[bytes]:
        while chunk := self.read(UPLOAD_CHUNK):
            yield chunk


def check_data(data: object) -> None:
    """Raise TypeError for data that is neither text, bytes nor a binary file."""
    if isinstance(data, (str, bytes, bytearray, memoryview)):
        return
    if not callable(getattr(data, "read", None)):
        raise TypeError("data must be bytes, str or a binary file object")
    if isinstance(data, io.TextIOBase):
        raise TypeError("data must be a binary file object (open it with 'rb')")


def request_body(data: FileData, meter: Meter | None = None) -> tuple[Body, Repeat]:
    """The PUT body for ``data``, and whether a failed PUT may be sent again."""
    check_data(data)
    meter = meter or Meter(None)
    if isinstance(data, (str, bytes)) and not meter.reporting:
        # In one piece: streamed from memory, http.client would send it in 16 KiB
        # blocks, a Python call and a TLS record each, with no progress to report.
        return (data.encode("utf-8") if isinstance(data, str) else data), Repeat.SAFE
    if isinstance(data, str):
        data = io.BytesIO(data.encode("utf-8"))
    elif isinstance(data, (bytes, bytearray, memoryview)):
        data = io.BytesIO(data)
    source: IO[bytes] = data
    if not _seekable(source):

        def once() -> Iterator[bytes]:
            meter.start(None)
            while chunk := source.read(UPLOAD_CHUNK):
                meter.advance(len(chunk))
                yield chunk

        return once, Repeat.NEVER
    start = source.tell()

    def rewound() -> _Reader | bytes:
        length = source.seek(0, os.SEEK_END) - start
        source.seek(start)
        meter.start(length)
        # An empty body goes as b"": requests would send an empty file chunked.
        return _Reader(source, length, meter) if length > 0 else b""

    return rewound, Repeat.SAFE


def _seekable(stream: IO[Any]) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, OSError, ValueError):
        return False


# --- single files ----------------------------------------------------------


def write(
    box: Box, path: str, data: FileData, deadline: Deadline, meter: Meter | None = None
) -> None:
    """Write ``data`` to the remote ``path``: 1 PUT.

    The service's explanation of a refusal is withheld (it might echo the
    file's bytes), so a refusal (403) says in the SDK's words what it means.
    """
    meter = meter or Meter(None)
    body, repeat = request_body(data, meter)
    try:
        _api.write_file(box.transport, box.sandbox_id, path, body, deadline, repeat=repeat)
    except CreateosApiError as exc:
        if exc.status != 403:
            raise
        raise CreateosApiError(
            exc.operation,
            403,
            request_id=exc.request_id,
            detail=f"sandbox {box.sandbox_id} refused to write {path}: the path is read-only "
            "or not one the files API serves (/proc, /sys, a mount); write it from a command "
            "instead, e.g. box.run(['sh', '-c', 'cat > PATH'], stdin=data)",
        ) from None
    meter.finish()


def fetch(box: Box, path: str, sink: IO[bytes], deadline: Deadline, meter: Meter) -> None:
    """Stream the remote ``path`` into ``sink`` (rewound and truncated on each attempt): 1 GET.

    The transport retries opening the stream; a stream that breaks midway
    is fetched again from the start, up to ``max_retries`` times.
    """
    streaming = False

    def attempt() -> None:
        nonlocal streaming
        streaming = False
        sink.seek(0)
        sink.truncate()
        with _opened(box, path, deadline) as stream:
            streaming = True
            meter.start(stream.length)
            for chunk in stream.chunks():
                sink.write(chunk)
                meter.advance(len(chunk))
        meter.finish()

    def broke_midway(exc: BaseException) -> bool:
        return streaming and isinstance(exc, CreateosApiError) and exc.status is None

    budget = ReconnectBudget(limit=box.transport.config.max_retries)
    budget.call(attempt, broke_midway, deadline=deadline, sleep=box.sleep)


def _opened(box: Box, path: str, deadline: Deadline) -> Stream:
    """The GET of ``path``; its 404 (no such file) as ``RemoteFileNotFoundError``."""
    try:
        return _api.read_file(box.transport, box.sandbox_id, path, deadline)
    except CreateosApiError as exc:
        if exc.status == 404:
            raise RemoteFileNotFoundError(path, exc.operation, exc.request_id) from None
        raise


def read(box: Box, path: str, deadline: Deadline) -> bytes:
    """The whole remote file, in memory: 1 GET."""
    buffer = io.BytesIO()
    fetch(box, path, buffer, deadline, Meter(None))
    return buffer.getvalue()


def upload(
    box: Box,
    local_path: str | os.PathLike[str],
    path: str,
    deadline: Deadline,
    meter: Meter | None = None,
) -> None:
    """Stream a local file to the remote ``path``: 1 PUT (retried, rewinding the file)."""
    with open(local_path, "rb") as source:
        write(box, path, source, deadline, meter)


def download(
    box: Box,
    path: str,
    local_path: str | os.PathLike[str],
    deadline: Deadline,
    meter: Meter | None = None,
) -> None:
    """Stream the remote ``path`` into ``local_path``, atomically: 1 GET."""
    target = os.path.abspath(local_path)
    if os.path.isdir(target):
        raise IsADirectoryError(f"{target} is a directory")
    _archive.require_parent(target)
    with _replacing(target) as sink:
        fetch(box, path, sink, deadline, meter or Meter(None))


@contextlib.contextmanager
def _replacing(target: str) -> Iterator[BinaryIO]:
    """A new file beside ``target`` that replaces it on success and vanishes on failure."""
    with _part_file(target) as (part, sink):
        yield sink
        sink.close()
        os.replace(part, target)


@contextlib.contextmanager
def _part_file(beside: str, suffix: str = ".part") -> Iterator[tuple[str, BinaryIO]]:
    """A temporary file in ``beside``'s directory, removed on the way out unless renamed.

    Created with mode 0o666 so that the umask applies, as for any new file
    (``mkstemp`` would leave a downloaded file readable by its owner only).
    """
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
    part, fd = new_beside(beside, suffix, lambda path: os.open(path, flags, 0o666))
    try:
        with os.fdopen(fd, "w+b") as sink:
            yield part, sink
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(part)


# --- directories -------------------------------------------------------------

# One line per path argument: "d" for a directory (or a link to one), "f" for anything else.
DIRECTORY_PROBE = 'for p do if [ -d "$p" ]; then echo d; else echo f; fi; done'


def directories(box: Box, paths: Sequence[str], deadline: Deadline) -> frozenset[str]:
    """Which of the remote ``paths`` are directories: 1 exec, however many paths."""
    result = _api.exec_command(
        box.transport, box.sandbox_id, "/bin/sh", ["-c", DIRECTORY_PROBE, "sh", *paths], deadline
    )
    stdout = result.get("stdout")
    answers = stdout.split() if isinstance(stdout, str) else []
    if result.get("exit_code") != 0 or len(answers) != len(paths) or set(answers) - {"d", "f"}:
        raise ProtocolError("the sandbox's answer to a directory probe is not understood")
    return frozenset(p for p, answer in zip(paths, answers, strict=True) if answer == "d")


def upload_dir(
    box: Box,
    local_dir: str | os.PathLike[str],
    path: str,
    deadline: Deadline,
    run: Run,
    meter: Meter | None = None,
) -> None:
    """Pack ``local_dir`` into a local temporary tar, PUT it to a scratch file, extract it
    into ``path`` with a run that also removes the scratch file: 4 requests."""
    root = os.path.abspath(local_dir)
    if not os.path.isdir(root):
        raise NotADirectoryError(f"{root} is not a directory")
    with tempfile.TemporaryFile(prefix="createos-sync-", suffix=".tar") as archive:
        _archive.pack(root, archive)
        archive.seek(0)
        with _scratch(box, "upload", remove_after=False) as scratch:
            write(box, scratch, archive, deadline, meter)
            _run_checked(
                run,
                ["/bin/sh", "-c", EXTRACT_SCRIPT, "sh", scratch, path],
                f"extracting into {path}",
            )


def download_dir(
    box: Box,
    path: str,
    local_dir: str | os.PathLike[str],
    deadline: Deadline,
    run: Run,
    meter: Meter | None = None,
) -> None:
    """Archive ``path`` into a scratch file, GET it into a local temporary file, remove the
    scratch file, then check every entry and extract into ``local_dir``: 5 requests."""
    target = _archive.check_target(local_dir)
    with _part_file(target, ".tar.part") as (_, archive):
        with _scratch(box, "download", remove_after=True) as scratch:
            argv = ["/bin/sh", "-c", ARCHIVE_SCRIPT, "sh", scratch, path]
            _run_checked(run, argv, f"archiving {path}", missing=path)
            fetch(box, scratch, archive, deadline, meter or Meter(None))
        archive.seek(0)
        _archive.unpack(archive, target)


def _run_checked(run: Run, argv: list[str], what: str, *, missing: str | None = None) -> None:
    """Run ``argv``; a failure raises ``CommandFailed`` (``RemoteFileNotFoundError`` naming
    ``missing`` when the command exits ``MISSING``)."""
    result = run(argv)
    if result.timed_out:
        result.check()  # raises CommandTimeout
    if result.ok:
        return
    if missing is not None and result.exit_code == MISSING:
        raise RemoteFileNotFoundError(missing)
    lines = result.stderr.strip().splitlines()
    detail = f": {lines[-1]}" if lines else ""
    raise CommandFailed(
        result, f"{what} failed in the sandbox (exit status {result.exit_code}){detail}"
    )


@contextlib.contextmanager
def _scratch(box: Box, kind: str, *, remove_after: bool) -> Iterator[str]:
    """A scratch path in the sandbox, removed on failure, and afterwards if ``remove_after``."""
    path = scratch_path(kind, ".tar")
    try:
        yield path
    except BaseException as exc:
        _remove(box, path, exc)
        raise
    if remove_after:
        _remove(box, path, None)


def _remove(box: Box, path: str, propagating: BaseException | None) -> None:
    """Remove a scratch file with one exec; a failure is logged (and noted on ``propagating``)."""
    if box.closing.is_set():
        return  # the lease is closing: the sandbox goes away, or is kept as it is
    try:
        result = _api.exec_command(
            box.transport, box.sandbox_id, "/bin/rm", ["-f", "--", path], box.cleanup_deadline()
        )
        problem = None if result.get("exit_code") == 0 else f"rm exited {result.get('exit_code')}"
    except CreateosError as exc:
        problem = str(exc)
    if problem is not None:
        message = (
            f"the scratch file {path} could not be removed from sandbox {box.sandbox_id} "
            f"({problem})"
        )
        log.warning("%s", message)
        if propagating is not None:
            add_note(propagating, message)
