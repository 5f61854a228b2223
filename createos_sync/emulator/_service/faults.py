"""Scripted faults: make chosen requests fail, stall, drop or lie, on purpose.

A fault names one operation (one endpoint) and applies to the next ``times``
matching requests, after routing, rate limiting and authentication. Faults
are consumed in the order they were added.
"""

from __future__ import annotations

import base64
import math
import threading
from dataclasses import dataclass, fields
from typing import Any

OPERATIONS = frozenset(
    {
        "healthz", "readyz", "hosts", "shapes", "rootfs", "whoami",
        "sandbox.create", "sandbox.list", "sandbox.get", "sandbox.delete", "sandbox.patch",
        "sandbox.pause", "sandbox.resume", "sandbox.fork", "sandbox.egress",
        "file.write", "file.read", "exec",
        "process.create", "process.list", "process.get", "process.connect",
        "process.input", "process.stdin_close", "process.signal", "process.resize",
        "process.wait", "process.delete",
        "template.create", "template.list", "template.get", "template.delete",
        "template.logs",
        "disk.create", "disk.list", "disk.get", "disk.delete", "disk.rotate",
        "disk.attach", "disk.mounts", "disk.detach",
        "network.create", "network.list", "network.get", "network.delete",
        "network.attach", "network.detach",
        "token.create", "token.get", "token.delete", "token.rotate",
        "sandbox.ssh_keys", "sandbox.resize", "sandbox.bandwidth", "sandbox.recharge",
        "sandbox.by_ip",
    }
)  # fmt: skip


@dataclass(frozen=True)
class Fault:
    """One scripted misbehaviour; construction validates the combination.

    ``status``, ``drop`` and ``body`` replace the answer (``perform`` carries
    out the real action first; never with 429 or 503, which say the request
    was not processed); a ``status`` answer carries ``message`` in a ``fail``
    or ``error`` ``envelope`` (by default ``fail`` for 4xx, ``error`` for 5xx);
    ``delay`` stalls before answering; ``trickle`` sends the real answer's
    body one byte at a time, that many seconds apart; ``drop_after_frames``
    cuts a ``process.connect`` stream after that many data frames (a
    ``template.logs`` stream after that many log events);
    ``hold_open`` keeps a ``process.connect`` stream open for that many
    seconds after its exit frame (heartbeats every 50 ms) instead of ending
    it; ``tree_exited_false`` makes ``process.delete`` answer ``tree_exited:
    false``, leaving the tree running when ``kill`` is False.
    """

    operation: str
    times: int = 1
    status: int | None = None
    drop: bool = False
    perform: bool = False
    delay: float = 0.0
    retry_after: int | None = None
    drop_after_frames: int | None = None
    hold_open: float = 0.0
    tree_exited_false: bool = False
    kill: bool = True
    body: bytes | None = None
    message: str = "scripted fault"
    envelope: str | None = None
    trickle: float = 0.0

    def __post_init__(self) -> None:
        problem = self._problem()
        if problem:
            raise ValueError(f"invalid Fault for {self.operation!r}: {problem}")

    def _problem(self) -> str | None:
        replacements = sum((self.status is not None, self.drop, self.body is not None))
        stream_change = (
            self.drop_after_frames is not None
            or self.tree_exited_false
            or self.trickle != 0
            or self.hold_open > 0
        )
        if self.operation not in OPERATIONS:
            return "unknown operation"
        if isinstance(self.times, bool) or not isinstance(self.times, int) or self.times < 1:
            return "times must be a positive integer"
        if self.status is not None and not (
            isinstance(self.status, int) and 400 <= self.status <= 599
        ):
            return "status must be an HTTP error status (400..599)"
        if replacements > 1:
            return "status, drop and body exclude each other"
        if self.perform and self.status is None and not self.drop:
            return "perform needs status or drop"
        if self.perform and self.status in (429, 503):
            return "429 and 503 mean the request was not processed: they exclude perform"
        if not isinstance(self.message, str) or self.envelope not in (None, "fail", "error"):
            return "message must be a str and envelope 'fail' or 'error'"
        if self.envelope is not None and self.status is None:
            return "envelope needs status"
        if not isinstance(self.trickle, (int, float)) or not (
            math.isfinite(self.trickle) and self.trickle >= 0
        ):
            return "trickle must be a finite number of seconds >= 0"
        if not isinstance(self.delay, (int, float)) or not (
            math.isfinite(self.delay) and self.delay >= 0
        ):
            return "delay must be a finite number >= 0"
        if self.retry_after is not None and (self.status != 429 or self.retry_after < 0):
            return "retry_after needs status 429 and a value >= 0"
        if self.drop_after_frames is not None and (
            self.operation not in ("process.connect", "template.logs") or self.drop_after_frames < 0
        ):
            return "drop_after_frames applies to process.connect and template.logs, and is >= 0"
        if not isinstance(self.hold_open, (int, float)) or not (
            math.isfinite(self.hold_open) and self.hold_open >= 0
        ):
            return "hold_open must be a finite number >= 0"
        if self.hold_open and self.operation != "process.connect":
            return "hold_open applies to process.connect only"
        if self.tree_exited_false and self.operation != "process.delete":
            return "tree_exited_false applies to process.delete only"
        if not self.kill and not self.tree_exited_false:
            return "kill=False needs tree_exited_false"
        if stream_change and replacements:
            return (
                "drop_after_frames / hold_open / tree_exited_false / trickle exclude status, "
                "drop and body"
            )
        if not (replacements or stream_change or self.delay > 0):
            return "the fault does nothing"
        return None


def fault_from_json(obj: Any) -> Fault:
    """A Fault from the admin endpoint's JSON (``body`` as ``body_base64``)."""
    if not isinstance(obj, dict):
        raise ValueError("a fault must be a JSON object")
    known = {f.name for f in fields(Fault)} - {"body"}
    unknown = set(obj) - known - {"body_base64"}
    if unknown:
        raise ValueError(f"unknown fault fields: {sorted(unknown)}")
    kwargs = {k: v for k, v in obj.items() if k in known}
    if obj.get("body_base64") is not None:
        kwargs["body"] = base64.b64decode(obj["body_base64"], validate=True)
    try:
        return Fault(**kwargs)
    except TypeError as exc:
        raise ValueError(str(exc)) from None


class FaultQueue:
    """Thread-safe, ordered list of pending faults."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: list[list[Any]] = []

    def add(self, fault: Fault) -> None:
        if not isinstance(fault, Fault):
            raise TypeError("add() takes a Fault")
        with self._lock:
            self._pending.append([fault, fault.times])

    def clear(self) -> None:
        with self._lock:
            self._pending.clear()

    def take(self, operation: str) -> Fault | None:
        """The first pending fault for ``operation``, using up one of its times."""
        with self._lock:
            for entry in self._pending:
                if entry[0].operation == operation:
                    entry[1] -= 1
                    if entry[1] == 0:
                        self._pending.remove(entry)
                    fault: Fault = entry[0]
                    return fault
        return None

    def pending(self) -> list[Fault]:
        with self._lock:
            return [entry[0] for entry in self._pending]
