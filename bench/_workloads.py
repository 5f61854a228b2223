"""The commands the benchmarks run, and the floors they are compared with.

A *floor* does the same managed-process run as ``Lease.run`` with the least
code: raw ``requests`` calls (create the process with the same start-gated
wrapper, connect, release the gate, read the NDJSON to the exit frame) and,
for output, the same decoding (json, base64, incremental UTF-8 per stream).
"""

from __future__ import annotations

import base64
import codecs
import json
import time
from collections.abc import Callable
from typing import Any

import requests

from createos_sync._commands.command import SHELL, Command, Gate

# Mixed text: ASCII, 2-, 3- and 4-byte UTF-8 characters, so that frames split characters.
UNIT = ("ascii text with some words 0123456789 " * 3 + "é€ 日本語 🙂 ü\n").encode()
UNIT_CHARS = len(UNIT.decode())

# Writes to stdout and stderr in turn (3:1), in sizes that never line up with characters.
GENERATOR = r"""
import os, sys
unit = bytes.fromhex(sys.argv[1])
left = [int(sys.argv[2]) * len(unit), int(sys.argv[3]) * len(unit)]
buf = memoryview(unit * (70000 // len(unit) + 2))
sizes = (65536, 8191, 32771, 16411, 49999)
offsets = [0, 0]
i = 0
while left[0] or left[1]:
    fd = 1 if (i % 4 != 3 and left[0]) or not left[1] else 2
    n = min(sizes[i % len(sizes)], left[fd - 1])
    off = offsets[fd - 1]
    os.write(fd, buf[off:off + n])
    offsets[fd - 1] = (off + n) % len(unit)
    left[fd - 1] -= n
    i += 1
"""


def generator_argv(total_bytes: int) -> tuple[list[str], dict[str, int]]:
    """argv writing about ``total_bytes`` (3/4 stdout, 1/4 stderr) and the characters expected."""
    units = total_bytes // len(UNIT)
    out_units = units * 3 // 4
    err_units = units - out_units
    argv = ["python3", "-c", GENERATOR, UNIT.hex(), str(out_units), str(err_units)]
    expected = {"stdout": out_units * UNIT_CHARS, "stderr": err_units * UNIT_CHARS}
    return argv, expected


def output_bytes(total_bytes: int) -> int:
    return (total_bytes // len(UNIT)) * len(UNIT)


def gated_wrapper(cmd: str | list[str]) -> list[str]:
    """The exact ``args`` ``Lease.run`` gives ``/bin/bash`` (start gate: EOF on stdin)."""
    return Command.parse(cmd).wrapper(Gate.STDIN_EOF)


Sink = Callable[[str, str], None]


class RawFloor:
    """The minimum raw ``requests`` sequence for one managed-process run (and file transfers,
    lease open + close), with keep-alive: one session, every body read to its end so that
    each connection goes back to the pool.

    ``verify`` is passed with every request: a session's own ``verify`` would give way
    to ``REQUESTS_CA_BUNDLE``.
    """

    def __init__(self, url: str, api_key: str, sandbox_id: str, verify: str | bool = True) -> None:
        self.session = requests.Session()
        self.headers = {"X-Api-Key": api_key}
        self.root = f"{url.rstrip('/')}/v1/sandboxes"
        self.sandbox = f"{self.root}/{sandbox_id}"
        self.base = f"{self.sandbox}/processes"
        self.verify = verify

    def _call(self, method: str, url: str, **kwargs: Any) -> requests.Response:
        reply = self.session.request(
            method, url, headers=self.headers, verify=self.verify, **kwargs
        )
        if not kwargs.get("stream"):
            reply.raise_for_status()
        return reply

    def run(self, wrapper_args: list[str], sink: Sink | None = None) -> dict[str, Any]:
        created = self._call("POST", self.base, json={"cmd": SHELL, "args": wrapper_args})
        pid = created.json()["data"]["process_id"]
        with self._call(
            "GET", f"{self.base}/{pid}/connect", params={"after": "0"}, stream=True
        ) as stream:
            stream.raise_for_status()
            self._call("POST", f"{self.base}/{pid}/stdin/close")
            chunks = stream.iter_content(64 * 1024)
            end = read_ndjson(chunks, sink)
            for _ in chunks:  # the body ends after the exit frame: read it, reuse the connection
                pass
            return end

    def write_file(self, path: str, data: bytes) -> None:
        self._call("PUT", f"{self.sandbox}/files", params={"path": path}, data=data)

    def read_file(self, path: str) -> bytes:
        return self._call("GET", f"{self.sandbox}/files", params={"path": path}).content

    def open_close(self, shape: str = "s-1vcpu-1gb") -> None:
        """Create a sandbox, poll every 50 ms until it runs, destroy it."""
        info = self._call("POST", self.root, json={"shape": shape}).json()["data"]
        while info["status"] != "running":
            time.sleep(0.05)
            info = self._call("GET", f"{self.root}/{info['id']}").json()["data"]
        self._call("DELETE", f"{self.root}/{info['id']}")

    def close(self) -> None:
        self.session.close()


def read_ndjson(chunks: Any, sink: Sink | None) -> dict[str, Any]:
    """Split, parse and decode NDJSON output frames until the exit frame."""
    decoders = {n: codecs.getincrementaldecoder("utf-8")("replace") for n in ("stdout", "stderr")}
    rest = b""
    for chunk in chunks:
        if rest:
            chunk = rest + chunk  # only a line cut by a chunk boundary is copied
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            line = chunk[start:end]
            start = end + 1
            frame = json.loads(line)
            kind = frame["type"]
            if kind == "data":
                text = decoders[frame["stream"]].decode(base64.b64decode(frame["data_base64"]))
                if sink is not None and text:
                    sink(frame["stream"], text)
            elif kind == "exit":
                for name, decoder in decoders.items():
                    tail = decoder.decode(b"", final=True)
                    if sink is not None and tail:
                        sink(name, tail)
                return dict(frame)
        rest = chunk[start:]
    raise RuntimeError("the stream ended before the exit frame")


class Counter:
    """An ``on_output`` sink that counts characters per stream (cheap, so it measures the SDK)."""

    def __init__(self) -> None:
        self.chars = {"stdout": 0, "stderr": 0}

    def __call__(self, stream: str, text: str) -> None:
        self.chars[stream] += len(text)
