"""A thin requests client for the emulator's tests, polling helpers, whether bubblewrap works."""

from __future__ import annotations

import base64
import functools
import json
from typing import Any

import requests

from createos_sync.emulator import Emulator

from ..waiting import wait_until


class Api:
    """requests against one emulator, with the key, plus a few helpers."""

    def __init__(self, emu: Emulator) -> None:
        self.emu = emu
        self.session = requests.Session()
        self.session.headers["X-Api-Key"] = emu.api_key

    def call(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        kwargs.setdefault("timeout", 30)
        return self.session.request(method, self.emu.url + path, **kwargs)

    def data(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self.call(method, path, **kwargs)
        assert response.ok, (response.status_code, response.text)
        body = response.json()
        assert body["status"] == "success"
        return body["data"]

    def sandbox(self, **body: Any) -> str:
        """Create a sandbox and wait until it is running."""
        body.setdefault("shape", "s-1vcpu-1gb")
        sandbox_id: str = self.data("POST", "/v1/sandboxes", json=body)["id"]
        self.wait_status(sandbox_id, "running")
        return sandbox_id

    def status(self, sandbox_id: str) -> str:
        status: str = self.data("GET", f"/v1/sandboxes/{sandbox_id}")["status"]
        return status

    def wait_status(self, sandbox_id: str, status: str) -> None:
        wait_until(lambda: self.status(sandbox_id) == status, what=f"status {status}")

    def process(self, sandbox_id: str, cmd: str, *args: str, **body: Any) -> str:
        body.update(cmd=cmd, args=list(args))
        reply = self.data("POST", f"/v1/sandboxes/{sandbox_id}/processes", json=body)
        process_id: str = reply["process_id"]
        return process_id

    def proc_path(self, sandbox_id: str, process_id: str, tail: str = "") -> str:
        return f"/v1/sandboxes/{sandbox_id}/processes/{process_id}{tail}"

    def connect(self, sandbox_id: str, process_id: str, after: int = 0) -> requests.Response:
        path = self.proc_path(sandbox_id, process_id, "/connect")
        return self.call("GET", path, params={"after": after}, stream=True)

    def frames(self, sandbox_id: str, process_id: str, after: int = 0) -> list[dict[str, Any]]:
        """Every line of a connect stream, up to and including the exit frame."""
        with self.connect(sandbox_id, process_id, after) as response:
            assert response.status_code == 200, response.text
            return [json.loads(line) for line in response.iter_lines() if line]

    def wait_exit(self, sandbox_id: str, process_id: str, scope: str = "leader") -> Any:
        path = self.proc_path(sandbox_id, process_id, "/wait")
        return self.data("GET", path, params={"scope": scope, "timeout_ms": 20_000})


def output(frames: list[dict[str, Any]], stream: str | None = None) -> bytes:
    return b"".join(
        base64.b64decode(f["data_base64"])
        for f in frames
        if f["type"] == "data" and (stream is None or f["stream"] == stream)
    )


@functools.cache
def bwrap_works() -> bool:
    with Emulator(isolation="auto", rate_limit=None) as probe:
        return probe.isolation == "bwrap"
