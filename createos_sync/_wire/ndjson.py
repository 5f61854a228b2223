"""The output stream's wire format: NDJSON lines turned into typed frames.

Knows nothing of sequence numbers' meaning, reconnection or decoding of the
payload's text: that is ``_commands.follow``'s job.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import re
import sys
from collections.abc import Iterable, Iterator

import attrs

from ..errors import ProtocolError
from .server_text import SIGNAL, token

log = logging.getLogger("createos_sync.stream")

MAX_LINE_BYTES = 1024 * 1024 + 4096  # the protocol's 1 MiB, plus room for the JSON around it
STREAMS = {"stdout": "stdout", "stderr": "stderr", "pty": "stdout"}


@attrs.frozen(slots=True)
class Data:
    seq: int
    stream: str  # "stdout" or "stderr" ("pty" output counts as stdout)
    data: bytes


@attrs.frozen(slots=True)
class Exit:
    exit_code: int | None
    signal: str | None


@attrs.frozen(slots=True)
class Error:
    error: str
    oldest_available_seq: int | None = None  # on an eviction: where the journal now starts


@attrs.frozen(slots=True)
class Heartbeat:
    pass


Frame = Data | Exit | Error | Heartbeat
HEARTBEAT = Heartbeat()

# (inferred) Data lines as the emulator writes them and a struct encoder would:
# compact JSON, fields in this order.
_CANONICAL_DATA = re.compile(
    rb'\{"type":"data","seq":([1-9][0-9]{0,17}),"stream":"(stdout|stderr|pty)","data_base64":"'
)


def split_lines(chunks: Iterable[bytes], max_line: int = MAX_LINE_BYTES) -> Iterator[bytes]:
    """Yield complete, non-empty lines; a trailing partial line (a cut stream) is dropped.

    A line cut across chunks is held as views of them and copied once, when joined.
    """
    pending: list[memoryview] = []
    pending_size = 0
    for chunk in chunks:
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            if end < 0:
                break
            if pending:
                line = b"".join((*pending, memoryview(chunk)[start:end]))
                pending.clear()
                pending_size = 0
            else:
                line = chunk[start:end]
            if len(line) > max_line:
                raise ProtocolError("an output stream line is longer than the protocol allows")
            if line.strip():
                yield line
            start = end + 1
        if start < len(chunk):
            pending.append(memoryview(chunk)[start:])
            pending_size += len(chunk) - start
            if pending_size > max_line:
                raise ProtocolError("an output stream line is longer than the protocol allows")


def parse_frame(line: bytes) -> Frame | None:
    """Decode one line; None for a frame type this client does not know (ignored)."""
    data = _canonical_data(line)
    return data if data is not None else parse_json_frame(line)


def parse_json_frame(line: bytes) -> Frame | None:
    """``parse_frame`` for any layout, through a JSON parser."""
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):  # nesting deeper than the decoder recurses is junk too
        raise ProtocolError("an output stream line is not JSON") from None
    if not isinstance(obj, dict):
        raise ProtocolError("an output stream line is not a JSON object")
    kind = obj.get("type")
    if kind == "data":
        return _data(obj)
    if kind == "heartbeat":
        return HEARTBEAT
    if kind == "exit":
        return _exit(obj)
    if kind == "error":
        error, oldest = obj.get("error"), obj.get("oldest_available_seq")
        if isinstance(oldest, bool) or not isinstance(oldest, int) or oldest < 1:
            oldest = None
        return Error(error if isinstance(error, str) else "unknown error", oldest)
    log.debug("ignoring an output frame of unknown type")
    return None


def _canonical_data(line: bytes) -> Data | None:
    """A data line in the service's exact layout, decoded without a JSON parser; else None.

    Output is almost all data lines, and most of each line is its base64
    payload: letting ``json`` scan it into a str only for base64 to turn it
    back into ASCII bytes cost a quarter of the instructions per MB. A line of
    this layout whose payload holds no quote or backslash is exactly the
    object ``{type, seq, stream, data_base64}``; anything else (other spacing,
    order, escapes, extra fields) takes the general path below.
    """
    if not line.endswith(b'"}'):
        return None
    head = _CANONICAL_DATA.match(line)
    if head is None:
        return None
    start, end = head.end(), len(line) - 2
    if line.find(b'"', start, end) >= 0 or line.find(b"\\", start, end) >= 0:
        return None
    return Data(int(head[1]), STREAMS[head[2].decode()], _b64decode(memoryview(line)[start:end]))


def _b64decode(payload: str | bytes | memoryview) -> bytes:
    try:
        return _strict_b64decode(payload)
    except (binascii.Error, ValueError):
        raise ProtocolError("a data frame's data_base64 is not valid base64") from None


if sys.version_info >= (3, 11):

    def _strict_b64decode(payload: str | bytes | memoryview) -> bytes:
        """``b64decode(validate=True)`` as it is since 3.11, without copying a view first
        (the payload is a view of its line)."""
        return binascii.a2b_base64(payload, strict_mode=True)

else:

    def _strict_b64decode(payload: str | bytes | memoryview) -> bytes:
        return base64.b64decode(payload, validate=True)


def _data(obj: dict[str, object]) -> Data:
    seq, stream, payload = obj.get("seq"), obj.get("stream"), obj.get("data_base64")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ProtocolError("a data frame has no valid seq")
    if not isinstance(stream, str) or stream not in STREAMS:
        raise ProtocolError("a data frame names an unknown stream")
    if not isinstance(payload, str):
        raise ProtocolError("a data frame has no data_base64")
    return Data(seq, STREAMS[stream], _b64decode(payload))


def _exit(obj: dict[str, object]) -> Exit:
    code, signal = obj.get("exit_code"), obj.get("signal")
    if isinstance(code, bool) or not isinstance(code, (int, type(None))):
        raise ProtocolError("an exit frame's exit_code is not an integer")
    if not isinstance(signal, (str, type(None))):
        raise ProtocolError("an exit frame's signal is not a string")
    if code is None and not signal:
        raise ProtocolError("an exit frame has neither exit_code nor signal")
    # The signal reaches RunResult.signal and messages: only a signal name is shown.
    return Exit(code, token(signal or None, SIGNAL))
