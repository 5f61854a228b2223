"""NDJSON response bodies: the process output stream and the streamed exec.

Each is an iterable with ``close``: the WSGI server calls ``close`` when the
response ends for any reason, including a client that went away, and that
detaches the journal reader so that backpressure is released.
"""

from __future__ import annotations

import binascii
import codecs
import json
from collections.abc import Callable, Iterator
from typing import Any

from .._machine.journal import Aborted, End, Expired, Frame, Reader

HEARTBEAT = b'{"type":"heartbeat"}\n'
EXPIRED = "output_offset_expired"


def _line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def data_line(frame: Frame) -> bytes:
    encoded = binascii.b2a_base64(frame.data, newline=False)
    head = b'{"type":"data","seq":%d,"stream":"%s","data_base64":"' % (
        frame.seq,
        frame.stream.encode(),
    )
    return head + encoded + b'"}\n'


def expired_line(expired: Expired) -> bytes:
    return _line({"type": "error", "error": EXPIRED, "oldest_available_seq": expired.oldest_seq})


def exit_line(end: End) -> bytes:
    if end.signal is not None:
        return _line({"type": "exit", "signal": end.signal})
    return _line({"type": "exit", "exit_code": end.exit_code})


class ConnectStream:
    """``process.connect``: replayed and live frames, heartbeats, then the exit frame.

    A connection that goes away before the end (the client, the network, a
    fault) leaves its reader's hold in the journal for the reconnection; an
    aborted journal (a failed sandbox) ends the stream without an exit frame.
    """

    def __init__(self, reader: Reader, heartbeat: float) -> None:
        self._reader = reader
        self._heartbeat = heartbeat
        self._ended = False

    def __iter__(self) -> Iterator[bytes]:
        yield b""  # sends the status line and headers at once
        while True:
            item = self._reader.next(self._heartbeat)
            if item is None:
                yield HEARTBEAT
            elif isinstance(item, Frame):
                yield data_line(item)
            else:
                self._ended = True
                if isinstance(item, End):
                    yield exit_line(item)
                elif isinstance(item, Expired):
                    yield expired_line(item)
                return

    def close(self) -> None:
        if self._ended:
            self._reader.close()
        else:
            self._reader.drop()


class ExecStream:
    """``exec?stream=true``: decoded text lines, heartbeats, then the exit code.

    Exec is not reconnectable, so a client that goes away ends the command:
    ``on_close`` is told whether the exit line was sent (what the command left in
    the background then lives on) or not (its tree is ended).
    """

    def __init__(self, reader: Reader, heartbeat: float, on_close: Callable[[bool], None]) -> None:
        self._reader = reader
        self._heartbeat = heartbeat
        self._on_close = on_close
        self._answered = False

    def __iter__(self) -> Iterator[bytes]:
        decoders = {
            name: codecs.getincrementaldecoder("utf-8")("replace") for name in ("stdout", "stderr")
        }
        yield b""  # sends the status line and headers at once
        while True:
            item = self._reader.next(self._heartbeat)
            if item is None:
                yield _line({"hb": True})
            elif isinstance(item, Frame):
                text = decoders[item.stream].decode(item.data)
                if text:
                    yield _line({item.stream: text})
            elif isinstance(item, End):
                for name, decoder in decoders.items():
                    rest = decoder.decode(b"", final=True)
                    if rest:
                        yield _line({name: rest})
                code, error = item.exec_status()
                if error is not None:
                    yield _line({"error": error})
                self._answered = True
                yield _line({"exit_code": code})
                return
            elif isinstance(item, Aborted):
                return  # the sandbox failed: no exit code will come
            else:
                yield _line({"error": EXPIRED})
                return

    def close(self) -> None:
        self._reader.close()
        self._on_close(self._answered)
