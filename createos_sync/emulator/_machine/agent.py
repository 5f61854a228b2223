"""The guest agent: ``POST /self/delete`` and ``POST /self/pause`` from inside a sandbox.

Every sandbox gets a listening socket of its own (``_netns`` makes it: at
``127.0.0.1:1029`` inside the sandbox's private network namespace, or on a
free port of the host's loopback that its processes find in
``CREATEOS_AGENT_URL``). The socket is the identity: a request that reaches
it acts on the sandbox the socket was made for. The agent never takes a
sandbox id from a request, and, as on the service, needs no API key.

One thread accepts on every agent socket; each connection is answered on a
short thread of its own, ``202`` first, and only then acted on (a delete kills
the very process that asked). Agent traffic is not API traffic: no key, no
rate limit, no request log, no scripted faults.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import selectors
import socket
import threading
from collections.abc import Callable
from urllib.parse import parse_qs

log = logging.getLogger("createos_sync.emulator")

ACTIONS = {"/self/delete": "delete", "/self/pause": "pause"}
HEAD_LIMIT = 16 * 1024
READ_TIMEOUT = 5.0
REASON = re.compile(r"[A-Za-z0-9 ._:-]{0,64}\Z")  # what of a reason is shown in the log

Act = Callable[[str, str], None]  # (sandbox id, action)


class GuestAgents:
    """The guest agents of one emulator: listening sockets, each bound to one sandbox."""

    def __init__(self, act: Act) -> None:
        self._act = act
        self._lock = threading.Lock()
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._thread: threading.Thread | None = None
        self._closed = False

    def serve(self, sandbox_id: str, listener: socket.socket) -> None:
        """Answer requests on ``listener`` as the agent of ``sandbox_id``."""
        listener.setblocking(False)
        with self._lock:
            if self._closed:
                raise RuntimeError("the guest agents are closed")
            self._selector.register(listener, selectors.EVENT_READ, sandbox_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._accept, name="emulator-guest-agent", daemon=True
                )
                self._thread.start()
        self._wake()

    def forget(self, listener: socket.socket) -> None:
        """Stop serving ``listener`` and close it."""
        with self._lock, contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(listener)
        listener.close()
        self._wake()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            thread = self._thread
        self._wake()
        if thread is not None:
            thread.join(2.0)
        with self._lock:
            for key in list(self._selector.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            self._selector.close()
        self._wake_w.close()

    def _wake(self) -> None:
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _accept(self) -> None:
        while True:
            with self._lock:
                if self._closed:
                    return
            for key, _ in self._selector.select():
                if key.data is None:
                    with contextlib.suppress(OSError):
                        self._wake_r.recv(4096)
                    continue
                listener: socket.socket = key.fileobj  # type: ignore[assignment]
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue  # nothing after all, or the socket was closed meanwhile
                threading.Thread(
                    target=self._answer, args=(conn, key.data), name="emulator-agent", daemon=True
                ).start()

    def _answer(self, conn: socket.socket, sandbox_id: str) -> None:
        with conn:
            conn.setblocking(True)
            conn.settimeout(READ_TIMEOUT)
            try:
                method, path, query = _request_line(conn)
            except (OSError, ValueError):
                return
            action = ACTIONS.get(path)
            if action is None:
                _reply(conn, 404, {"status": "fail", "message": "not found"})
                return
            if method != "POST":
                _reply(conn, 405, {"status": "fail", "message": "method not allowed"})
                return
            _reply(conn, 202, {"status": "success", "data": {"accepted": action}})
        reason = (parse_qs(query).get("reason") or [""])[0]
        shown = reason if REASON.match(reason) else "(not shown)"
        log.info("guest agent: sandbox %s asked to %s itself (reason: %s)", sandbox_id, action,
                 shown or "-")  # fmt: skip
        self._act(sandbox_id, action)


def _request_line(conn: socket.socket) -> tuple[str, str, str]:
    """(method, path, query) of the request on ``conn``; its head is read and dropped."""
    head = b""
    while b"\r\n\r\n" not in head and b"\n\n" not in head:
        chunk = conn.recv(4096)
        if not chunk or len(head) > HEAD_LIMIT:
            raise ValueError("incomplete request")
        head += chunk
    line = head.split(b"\n", 1)[0].decode("latin-1").strip()
    method, target, _ = line.split(" ", 2)
    path, _, query = target.partition("?")
    return method, path, query


def _reply(conn: socket.socket, status: int, body: dict[str, object]) -> None:
    reasons = {202: "Accepted", 404: "Not Found", 405: "Method Not Allowed"}
    payload = json.dumps(body).encode()
    head = (
        f"HTTP/1.1 {status} {reasons[status]}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\nConnection: close\r\n\r\n"
    )
    with contextlib.suppress(OSError):
        conn.sendall(head.encode("ascii") + payload)
