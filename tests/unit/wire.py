"""A scripted CreateOS service for wire-level tests, built on ``responses``."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import urlsplit

import responses

BASE = "https://api.test"
API = BASE + "/v1"
KEY = "sk-live-SECRET-abc123"
SANDBOX = "sb-1"
PROCESS = "proc-1"
WATCHDOG = "proc-ttl"


def envelope(data: Any) -> dict[str, Any]:
    return {"status": "success", "data": data}


def failure(status: int, message: str = "failed") -> dict[str, Any]:
    # Real error bodies may echo the request, key included: make sure ours do.
    return {"status": "fail", "data": {"echo": KEY}, "message": f"{message} {KEY}", "code": status}


def data(seq: int, payload: bytes | str, stream: str = "stdout") -> dict[str, Any]:
    raw = payload.encode() if isinstance(payload, str) else payload
    return {
        "type": "data",
        "seq": seq,
        "stream": stream,
        "data_base64": base64.b64encode(raw).decode(),
    }


def exit_frame(code: int | None = 0, signal: str | None = None) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "exit"}
    if code is not None:
        frame["exit_code"] = code
    if signal is not None:
        frame["signal"] = signal
    return frame


def ndjson(*frames: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(f).encode() + b"\n" for f in frames)


class Chunked(io.RawIOBase):
    """A response body delivered in the given pieces, then EOF or an exception."""

    def __init__(self, pieces: Iterable[bytes], then: BaseException | None = None) -> None:
        self.pieces = list(pieces)
        self.then = then

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self.pieces:
            if self.then is not None:
                raise self.then
            return 0
        piece = self.pieces.pop(0)
        buffer[: len(piece)] = piece
        return len(piece)


def sandbox(status: str = "running", sandbox_id: str = SANDBOX, **extra: Any) -> dict[str, Any]:
    return {"id": sandbox_id, "status": status, "shape": "s-1vcpu-1gb", **extra}


def process(tree_exited: bool | None = None, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"process_id": PROCESS, "pid": 42, "state": "running"}
    if tree_exited is not None:
        record["tree_exited"] = tree_exited
        record["state"] = "exited" if tree_exited else "terminating"
    return {**record, **extra}


def _is_watchdog(request: Any) -> bool:
    if request.method != "POST" or not request.url.endswith("/processes"):
        return False
    return bool(json.loads(request.body)["args"][2:3] == ["createos-sync-ttl"])


class Service:
    """Registers endpoint answers on a ``responses`` mock, in call order."""

    def __init__(self, mock: responses.RequestsMock) -> None:
        self.mock = mock

    def add(self, method: str, path: str, status: int = 200, body: Any = None, **kw: Any) -> None:
        url = API + path
        if isinstance(body, BaseException) and not isinstance(body, Exception):

            def interrupt(request: Any) -> Any:
                raise body

            self.mock.add_callback(method, url, callback=interrupt)
        elif isinstance(body, BaseException):
            self.mock.add(method, url, body=body)
        elif isinstance(body, (bytes, io.BufferedReader)):
            self.mock.add(method, url, body=body, status=status, **kw)
        else:
            payload = failure(status) if status >= 400 and body is None else envelope(body)
            self.mock.add(method, url, json=payload, status=status, **kw)

    # sandboxes
    def create_sandbox(self, status: str = "running", http: int = 201, body: Any = None) -> None:
        self.add("POST", "/sandboxes", http, sandbox(status) if body is None else body)

    def get_sandbox(self, status: str = "running") -> None:
        self.add("GET", f"/sandboxes/{SANDBOX}", body=sandbox(status))

    def destroy_sandbox(self, http: int = 200, sandbox_id: str = SANDBOX) -> None:
        body = None if http >= 400 else {"id": sandbox_id, "status": "destroying"}
        self.add("DELETE", f"/sandboxes/{sandbox_id}", http, body)

    def close(self, lease: Any, sandbox_id: str = SANDBOX) -> None:
        """``lease.close()``, the public way, its destroy answered (none is sent when the
        lease found its sandbox gone: then none is expected)."""
        path = f"/sandboxes/{sandbox_id}"
        before = len(self.calls("DELETE", path))
        self.destroy_sandbox(sandbox_id=sandbox_id)
        lease.close()
        if len(self.calls("DELETE", path)) == before:
            self.mock.remove("DELETE", API + path)

    def open_running(self) -> None:
        """A creation answered ``running``, then the ttl watchdog's creation."""
        self.create_sandbox("running")
        self.watchdog()

    def watchdog(self, http: int = 201, sandbox_id: str = SANDBOX) -> None:
        """The ttl watchdog's process creation (every lease with a ttl opens with it)."""
        body = None if http >= 400 else process(process_id=WATCHDOG)
        self.add("POST", f"/sandboxes/{sandbox_id}/processes", http, body)

    def stop_watchdog(self, http: int = 200, tree_exited: bool = True) -> None:
        """The termination of the ttl watchdog at close (kept or paused sandbox)."""
        body = None if http >= 400 else process(tree_exited=tree_exited, process_id=WATCHDOG)
        self.add("DELETE", f"/sandboxes/{SANDBOX}/processes/{WATCHDOG}", http, body)

    def ttl_write(self, http: int = 200) -> None:
        """A write of the ttl file (a renewal, or hold / stop); the path is the lease's own."""
        self.add("PUT", f"/sandboxes/{SANDBOX}/files", http, None if http >= 400 else {})

    # processes
    def create_process(self, http: int = 201, body: Any = None) -> None:
        self.add(
            "POST", f"/sandboxes/{SANDBOX}/processes", http, process() if body is None else body
        )

    def connect(self, *frames: dict[str, Any], http: int = 200, raw: Any = None) -> None:
        body = raw if raw is not None else ndjson(*frames)
        if http != 200:
            self.add("GET", f"/sandboxes/{SANDBOX}/processes/{PROCESS}/connect", http)
        else:
            self.add(
                "GET",
                f"/sandboxes/{SANDBOX}/processes/{PROCESS}/connect",
                200,
                body,
                content_type="application/x-ndjson",
            )

    def close_stdin(self, http: int = 200) -> None:
        self.add("POST", f"/sandboxes/{SANDBOX}/processes/{PROCESS}/stdin/close", http, {})

    def terminate(self, http: int = 200, tree_exited: bool = True) -> None:
        body = None if http >= 400 else process(tree_exited=tree_exited)
        self.add("DELETE", f"/sandboxes/{SANDBOX}/processes/{PROCESS}", http, body)

    def get_process(self, http: int = 200, tree_exited: bool = True, body: Any = None) -> None:
        if body is None and http < 400:
            body = process(tree_exited=tree_exited)
        self.add("GET", f"/sandboxes/{SANDBOX}/processes/{PROCESS}", http, body)

    def run(self, *frames: dict[str, Any]) -> None:
        """The three requests of a plain run."""
        self.create_process()
        self.connect(*frames)
        self.close_stdin()

    # inspection
    def calls(self, method: str | None = None, contains: str = "") -> list[Any]:
        """The calls made, the ttl watchdog's creation left out (``mock.calls`` has them all)."""
        return [
            c
            for c in self.mock.calls
            if (method is None or c.request.method == method)
            and contains in c.request.url
            and not _is_watchdog(c.request)
        ]

    def destroys(self) -> list[Any]:
        """The ``DELETE`` of the sandbox itself (not of one of its processes)."""
        return [
            c
            for c in self.calls("DELETE")
            if urlsplit(c.request.url).path.endswith(f"/sandboxes/{SANDBOX}")
        ]

    def process_bodies(self) -> Sequence[dict[str, Any]]:
        """The bodies of the user's process creations (the ttl watchdog's left out)."""
        return [
            json.loads(c.request.body)
            for c in self.calls("POST", "/processes")
            if c.request.url.endswith("/processes")
        ]
