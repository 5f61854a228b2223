"""The client's side of the kernel's protocol (``_kernel``'s docstring): what is sent, and
the frames read back from the kernel's stdout.

The kernel travels on its own stdin, behind a bootstrap small enough for ``python3 -c``:
eight digits of length, then the source, read exactly (so that the first cell, sent in
the same input request, stays for the kernel to read).
"""

from __future__ import annotations

import base64
import binascii
import json
import secrets
from importlib import resources

import attrs

from ..errors import ProtocolError

# Reads exactly the kernel's length and source from fd 0, then runs it; argv stays short.
BOOTSTRAP = """import os
def take(n):
    data = b""
    while len(data) < n:
        more = os.read(0, n - len(data))
        if not more:
            raise SystemExit("createos kernel: its source was cut short")
        data += more
    return data
exec(compile(take(int(take(8))), "<createos-kernel>", "exec"), {"__name__": "createos_kernel"})
"""
_JOINED = "# joined in the sandbox"
_FUTURE = "from __future__ import annotations\n"
MAX_LINE = 4 * 1024 * 1024  # a frame line is under 70 KiB: anything this long is not ours
# A frame continued over lines: a result is at most 32 MiB of JSON (the kernel's RESULT_LIMIT),
# so more is not the kernel's (a cell writing over its channel): refused, not kept.
MAX_FRAME = 48 * 1024 * 1024


def kernel_source() -> bytes:
    """``_kernel_display`` then ``_kernel``, as one module, with the call that starts it."""
    here = resources.files(__package__ or "createos_sync.interpreter")
    display = (here / "_kernel_display.py").read_text("utf-8")
    kernel = (here / "_kernel.py").read_text("utf-8").replace(_FUTURE, "", 1)
    kernel = "".join(
        line for line in kernel.splitlines(keepends=True) if not line.rstrip().endswith(_JOINED)
    )
    return f"{display}\n{kernel}\nmain()\n".encode()


def boot_payload() -> bytes:
    source = kernel_source()
    return b"%08d" % len(source) + source


def new_token() -> str:
    """A cell's token: what no earlier cell's frames carry, and no cell can guess."""
    return secrets.token_hex(12)


def request(op: str, token: str, **fields: object) -> bytes:
    """One request line: base64 of JSON, so a cell's source may hold any character."""
    body = json.dumps({"op": op, "token": token, **fields}).encode()
    return base64.b64encode(body) + b"\n"


@attrs.frozen
class Frame:
    token: str
    kind: str  # out, err, res, end
    payload: bytes


class FrameReader:
    """Turns the kernel's stdout text, as it arrives in pieces, into whole ``Frame`` s.

    A frame continued over several lines (``kind+``) comes out once, whole. What
    is not a frame (a line without three fields, or not base64) raises
    ``ProtocolError``: only the kernel writes there.
    """

    def __init__(self) -> None:
        self._partial = ""
        self._pieces: dict[tuple[str, str], list[bytes]] = {}
        self._sizes: dict[tuple[str, str], int] = {}

    def feed(self, text: str) -> list[Frame]:
        lines = (self._partial + text).split("\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE:
            raise ProtocolError("the interpreter wrote a line too long to be one of its frames")
        frames = []
        for line in lines:
            frame = self._line(line)
            if frame is not None:
                frames.append(frame)
        return frames

    def _line(self, line: str) -> Frame | None:
        fields = line.split(" ")
        if len(fields) != 3:
            raise ProtocolError("the interpreter wrote a line that is not one of its frames")
        token, kind, data = fields
        try:
            payload = base64.b64decode(data, validate=True)
        except binascii.Error:
            raise ProtocolError("the interpreter wrote a frame that is not base64") from None
        key = (token, kind.rstrip("+"))
        if kind.endswith("+"):
            pieces = self._pieces.setdefault(key, [])
            pieces.append(payload)
            self._sizes[key] = self._sizes.get(key, 0) + len(payload)
            if self._sizes[key] > MAX_FRAME:
                raise ProtocolError("the interpreter sent a frame larger than any of its own")
            return None
        if key in self._pieces:
            payload = b"".join([*self._pieces.pop(key), payload])
            del self._sizes[key]
        return Frame(token, key[1], payload)

    @property
    def leftover(self) -> str:
        """What came after the last whole line (the kernel died mid-frame)."""
        return self._partial
