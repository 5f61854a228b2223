"""File transfer between this machine and a sandbox, streamed in constant memory.

Uploads of bytes, text and seekable files are retried like any idempotent
PUT (each attempt rewinds the file); a stream that cannot be rewound is sent
once and never replayed. Downloads go to a temporary file beside the target
and are renamed into place only when complete, so a failure never leaves a
half-written file behind.
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, BinaryIO

from . import _api
from ._box import Box
from ._deadline import Deadline
from ._http import Body
from ._retry import Repeat

FileData = bytes | bytearray | memoryview | str | BinaryIO


def check_remote_path(path: str) -> str:
    """A remote path must be an absolute ``str`` without NUL."""
    if not isinstance(path, str):
        raise TypeError("a remote path must be a str")
    if not path.startswith("/"):
        raise ValueError("a remote path must be absolute (start with /)")
    if "\0" in path:
        raise ValueError("a remote path must not contain NUL")
    return path


def request_body(data: FileData) -> tuple[Body, Repeat]:
    """The PUT body for ``data``, and whether a failed PUT may be sent again."""
    if isinstance(data, str):
        return data.encode("utf-8"), Repeat.SAFE
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), Repeat.SAFE
    if not callable(getattr(data, "read", None)):
        raise TypeError("data must be bytes, str or a binary file object")
    if isinstance(data, io.TextIOBase):
        raise TypeError("data must be a binary file object (open it with 'rb')")
    if _seekable(data):
        start = data.tell()

        def rewound() -> BinaryIO:
            data.seek(start)
            return data

        return rewound, Repeat.SAFE
    return (lambda: data), Repeat.NEVER


def _seekable(stream: IO[Any]) -> bool:
    try:
        return bool(stream.seekable())
    except (AttributeError, OSError, ValueError):
        return False


def write(box: Box, path: str, data: FileData, deadline: Deadline) -> None:
    body, repeat = request_body(data)
    _api.write_file(box.transport, box.sandbox_id, path, body, deadline, repeat=repeat)


def copy_to(box: Box, path: str, sink: Callable[[bytes], object], deadline: Deadline) -> None:
    """Stream a remote file into ``sink`` chunk by chunk."""
    with _api.read_file(box.transport, box.sandbox_id, path, deadline) as stream:
        for chunk in stream.chunks():
            sink(chunk)


def read(box: Box, path: str, deadline: Deadline) -> bytes:
    buffer = io.BytesIO()
    copy_to(box, path, buffer.write, deadline)
    return buffer.getvalue()


def upload(box: Box, local_path: str | os.PathLike[str], path: str, deadline: Deadline) -> None:
    with open(local_path, "rb") as source:
        write(box, path, source, deadline)


def download(box: Box, path: str, local_path: str | os.PathLike[str], deadline: Deadline) -> None:
    target = Path(local_path)
    fd, temporary = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".part", dir=target.parent or "."
    )
    try:
        with os.fdopen(fd, "wb") as sink:
            copy_to(box, path, sink.write, deadline)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
