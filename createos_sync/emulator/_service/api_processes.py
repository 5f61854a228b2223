"""Endpoints for managed processes and one-shot exec."""

from __future__ import annotations

import base64
import binascii
import os
import signal
import threading
import time
from typing import Any

from werkzeug.wrappers import Request, Response

from .._machine.journal import Aborted, End, Expired, Frame, Item, OffsetExpired
from .._machine.processes import Command, ManagedProcess, StdinClosed
from .._machine.terminal import MAX_SIDE
from .._state.sandbox import Sandbox
from .._state.sandboxes import SandboxStore
from .._wire import ApiError, integer, json_body, query_int, success, text, text_list, text_map
from .streams import ConnectStream, ExecStream

NDJSON = "application/x-ndjson"
MAX_WAIT_MS = 3_600_000
MANAGED = ("process", "pty")  # the kinds the processes API shows (not one-shot execs)


class ProcessApi:
    def __init__(self, store: SandboxStore, heartbeat: float) -> None:
        self._store = store
        self._heartbeat = heartbeat

    def create(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        body = json_body(request)
        command = _command(sandbox, body, text(body, "cwd", default=sandbox.spec.workdir))
        size = None if body.get("pty") is None else _size(body["pty"])
        process = self._store.new_process("process", command, size=size)
        self._store.spawn(sandbox_id, process)
        return success(process.to_json())

    def list(self, request: Request, sandbox_id: str) -> Response:
        processes = list(self._store.live(sandbox_id).processes.values())
        return success({"processes": [p.to_json() for p in processes if p.kind in MANAGED]})

    def get(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        return success(self._store.process(sandbox_id, process_id).to_json())

    def connect(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        after = query_int(request, "after", 0, 1 << 62, 0)
        try:
            reader = process.journal.attach(after)
        except OffsetExpired as expired:
            data = {"oldest_available_seq": expired.oldest_seq}
            raise ApiError(410, "output_offset_expired", data=data) from None
        stream = ConnectStream(reader, self._heartbeat)
        return Response(stream, mimetype=NDJSON, direct_passthrough=True)

    def input(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        try:
            data = base64.b64decode(text(json_body(request), "data_base64"), validate=True)
        except binascii.Error:
            raise ApiError(400, "data_base64 is not valid base64") from None
        try:
            return success({"input_seq": process.write_input(data)})
        except StdinClosed:
            raise ApiError(409, "stdin is closed") from None

    def stdin_close(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        if process.kind == "pty":
            # (inferred) the official SDK documents this for pipe processes only
            raise ApiError(400, "a terminal process has no stdin to close: send Ctrl-D as input")
        try:
            process.close_stdin()
        except StdinClosed:
            raise ApiError(409, "stdin is already closed") from None
        return success({"process_id": process.id, "stdin_closed": True})

    def resize(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        if process.kind != "pty":
            raise ApiError(400, "only a terminal process (created with pty) can be resized")
        try:
            process.resize(*_size(json_body(request)))
        except StdinClosed:
            raise ApiError(409, "the process has exited") from None
        return success(process.to_json())

    def signal(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        process.send_signal(_signal_number(json_body(request).get("signal")))
        return success(process.to_json())

    def wait(self, request: Request, sandbox_id: str, process_id: str) -> Response:
        process = self._store.process(sandbox_id, process_id)
        scope = request.args.get("scope", "leader")
        if scope not in ("leader", "tree"):
            raise ApiError(400, "scope must be leader or tree")
        timeout_ms = query_int(request, "timeout_ms", 0, MAX_WAIT_MS, 30_000)
        if not process.wait(scope, timeout_ms / 1000):
            raise ApiError(408, "wait timed out", data=process.to_json())
        return success(process.to_json())

    def delete(
        self,
        request: Request,
        sandbox_id: str,
        process_id: str,
        *,
        confirm: bool = True,
        kill: bool = True,
    ) -> Response:
        """Terminate the tree; ``confirm``/``kill`` False serve the tree_exited_false fault."""
        process = self._store.process(sandbox_id, process_id)
        grace_ms = query_int(request, "grace_ms", 0, 600_000, 1000)
        if kill:
            process.terminate(grace_ms / 1000)
        answer = process.to_json()
        if not confirm:
            answer["tree_exited"] = False
        return success(answer)

    def exec(self, request: Request, sandbox_id: str) -> Response:
        sandbox = self._store.running(sandbox_id)
        body = json_body(request)
        command = _command(sandbox, body, sandbox.spec.workdir)  # a template's WORKDIR
        stdin = text(body, "stdin", default="").encode()
        streamed = request.args.get("stream") == "true" or body.get("stream") is True
        process = self._store.new_process("exec", command)
        reader = process.journal.attach(0)  # before it starts: exec loses nothing
        try:
            self._store.spawn(sandbox_id, process)
        except ApiError:
            reader.close()
            raise
        threading.Thread(target=_feed, args=(process, stdin), daemon=True).start()
        if streamed:
            stream = ExecStream(
                reader,
                self._heartbeat,
                lambda answered: self._store.end_exec(sandbox_id, process, answered=answered),
            )
            return Response(stream, mimetype=NDJSON, direct_passthrough=True)
        started = time.monotonic()
        output = {"stdout": bytearray(), "stderr": bytearray()}
        item: Item | None = None
        try:
            while not isinstance(item := reader.next(self._heartbeat), (End, Expired, Aborted)):
                if isinstance(item, Frame):
                    output[item.stream] += item.data
        finally:
            reader.close()
            answered = isinstance(item, End)  # its client stayed to the end: background lives
            self._store.end_exec(sandbox_id, process, answered=answered)
        if isinstance(item, Aborted):
            raise ApiError(409, "the sandbox failed while the command ran")
        if isinstance(item, Expired):  # cannot happen: attached before the start
            raise ApiError(500, "exec output was evicted")
        code, error = item.exec_status()
        result: dict[str, Any] = {
            "exit_code": code,
            "stdout": output["stdout"].decode("utf-8", "replace"),
            "stderr": output["stderr"].decode("utf-8", "replace"),
        }
        if error is not None:
            result["error"] = error
        return success({"result": result, "exec_ms": round((time.monotonic() - started) * 1000)})


def _command(sandbox: Sandbox, body: dict[str, Any], cwd: str) -> Command:
    cmd = text(body, "cmd")
    if not cmd:
        raise ApiError(400, "cmd must not be empty")
    if not cwd.startswith("/"):
        raise ApiError(400, "cwd must be an absolute path")
    if not os.path.isdir(sandbox.storage.view(cwd)):
        raise ApiError(400, "cwd is not a directory in the sandbox")
    overrides = text_map(body, "env")
    undeclared = sorted(set(overrides) - set(sandbox.spec.envs))
    if undeclared:
        raise ApiError(400, "env overrides are accepted only for keys declared at creation")
    agent = sandbox.net.env if sandbox.net is not None else {}  # where its guest agent is
    return Command(cmd, text_list(body, "args"), cwd, {**sandbox.spec.envs, **overrides, **agent})


def _size(value: Any) -> tuple[int, int]:
    """``{rows, cols}`` of a terminal, each 1..65535 (struct winsize holds unsigned shorts)."""
    if not isinstance(value, dict):
        raise ApiError(400, "pty must be an object {rows, cols}")
    rows = integer(value, "rows", 1, MAX_SIDE, None)
    cols = integer(value, "cols", 1, MAX_SIDE, None)
    if rows is None or cols is None:
        raise ApiError(400, "pty needs rows and cols")
    return rows, cols


def _signal_number(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        valid = {s.value for s in signal.Signals}
        if value in valid:
            return value
    elif isinstance(value, str):
        name = value.upper() if value.upper().startswith("SIG") else f"SIG{value.upper()}"
        if name in signal.Signals.__members__:
            return int(signal.Signals[name])
    raise ApiError(400, "signal must be a signal name such as SIGTERM")


def _feed(process: ManagedProcess, data: bytes) -> None:
    """Exec's stdin: write it all, then close, so the command sees EOF."""
    try:
        if data:
            process.write_input(data)
        process.close_stdin()
    except StdinClosed:
        pass
