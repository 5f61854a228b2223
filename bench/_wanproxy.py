"""A loopback TCP proxy that behaves like a long network path: every byte takes RTT/2 each way.

It runs in a process of its own (so that its threads never compete for the
GIL of the client being measured) and counts the connections it accepts.

What it models, per connection:

- each direction delivers every chunk ``rtt / 2`` after it was sent, in
  order (a link with latency and no bandwidth limit);
- a new connection's first bytes leave the client only one RTT after the
  connection was opened: on a real path the TCP handshake (SYN, SYN-ACK)
  takes that round trip before the client can send anything. On loopback
  ``connect()`` returns at once, so the proxy holds the bytes instead.

A TLS 1.3 handshake through it then costs one more RTT, so a new HTTPS
connection costs two RTTs before its request is sent, as on the internet.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import socket
import threading
import time
from multiprocessing.sharedctypes import Synchronized
from typing import Any


def _pipe(source: socket.socket, target: socket.socket, delay: float, hold_until: float) -> None:
    """Copy ``source`` to ``target``, each chunk ``delay`` late, none before ``hold_until``."""
    pending: queue.Queue[tuple[float, bytes]] = queue.Queue()

    def deliver() -> None:
        while True:
            due, data = pending.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            try:
                if not data:
                    target.shutdown(socket.SHUT_WR)
                    return
                target.sendall(data)
            except OSError:
                return

    writer = threading.Thread(target=deliver, daemon=True)
    writer.start()
    while True:
        try:
            data = source.recv(1 << 16)
        except OSError:
            data = b""
        pending.put((max(time.monotonic(), hold_until) + delay, data))
        if not data:
            break
    writer.join()


def _serve_one(client: socket.socket, upstream: tuple[str, int], rtt: float) -> None:
    opened = time.monotonic()
    try:
        server = socket.create_connection(upstream)
    except OSError:
        client.close()
        return
    for sock in (client, server):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    half = rtt / 2
    up = threading.Thread(target=_pipe, args=(client, server, half, opened + rtt), daemon=True)
    down = threading.Thread(target=_pipe, args=(server, client, half, 0.0), daemon=True)
    up.start()
    down.start()
    up.join()
    down.join()
    for sock in (client, server):
        with contextlib.suppress(OSError):
            sock.close()


def _run(listener: socket.socket, upstream: tuple[str, int], rtt: float, count: Any) -> None:
    while True:
        client, _ = listener.accept()
        with count.get_lock():
            count.value += 1
        threading.Thread(target=_serve_one, args=(client, upstream, rtt), daemon=True).start()


class DelayProxy:
    """``with DelayProxy((host, port), rtt=0.04) as proxy:``, then connect to its ``port``."""

    def __init__(self, upstream: tuple[str, int], rtt: float) -> None:
        self.rtt = rtt
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=64)
        self.port = self._listener.getsockname()[1]
        context = multiprocessing.get_context("fork")
        self._count: Synchronized[int] = context.Value("i", 0)  # type: ignore[assignment]
        self._process = context.Process(
            target=_run, args=(self._listener, upstream, rtt, self._count), daemon=True
        )
        self._process.start()
        self._listener.close()  # the child has its own copy

    @property
    def accepted(self) -> int:
        """Connections accepted so far."""
        return int(self._count.value)

    def close(self) -> None:
        self._process.terminate()
        self._process.join(10)

    def __enter__(self) -> DelayProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
