"""Noticing a client that hangs up while the proxy waits on a sandbox's silent server.

A proxied answer is relayed by a thread blocked reading the sandbox's
server; if the browser goes away meanwhile, that thread would learn it only
at its next write, which a long poll or a stalled stream may never make. It
would stay blocked, and the sandbox would look busy to auto-pause, for as
long as the server stays silent. One thread per emulator watches the client
sockets of the answers being relayed: when one reaches end of file, the
upstream connection is shut down, which ends the relay at once.

The thread runs only while something is watched, so an emulator that is
closed leaves none behind.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import threading


class Hangups:
    """Shut down an upstream connection when its client's connection reaches end of file."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._selector: selectors.BaseSelector | None = None
        self._wake: tuple[socket.socket, socket.socket] | None = None

    def watch(self, client: socket.socket, upstream: socket.socket) -> None:
        with self._lock:
            if self._selector is None:
                self._selector = selectors.DefaultSelector()
                self._wake = socket.socketpair()
                self._selector.register(self._wake[0], selectors.EVENT_READ, None)
                threading.Thread(
                    target=self._run,
                    args=(self._selector, self._wake),
                    name="emulator-ingress-hangups",
                    daemon=True,
                ).start()
            with contextlib.suppress(KeyError, ValueError):  # already watched, or closed
                self._selector.register(client, selectors.EVENT_READ, upstream)
            self._poke()

    def forget(self, client: socket.socket) -> None:
        with self._lock:
            if self._selector is not None:
                with contextlib.suppress(KeyError, ValueError):
                    self._selector.unregister(client)
                self._poke()

    def _poke(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(OSError):
                self._wake[1].send(b".")

    def _run(
        self, selector: selectors.BaseSelector, wake: tuple[socket.socket, socket.socket]
    ) -> None:
        while True:
            with self._lock:
                if len(selector.get_map()) <= 1:  # only the wake-up socket: stop
                    self._selector = self._wake = None
                    selector.close()
                    wake[0].close()
                    wake[1].close()
                    return
            for key, _ in selector.select():
                if key.data is None:
                    with contextlib.suppress(OSError):
                        wake[0].recv(4096)
                    continue
                self._check(key.fileobj, key.data)  # type: ignore[arg-type]

    def _check(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            hung_up = client.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return
        except OSError:  # reset by the peer, or closed
            hung_up = True
        except ValueError:  # a TLS socket cannot be peeked at: stop watching it
            hung_up = False
        self.forget(client)  # a client that sent data (a pipelined request) is not watched
        if hung_up:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_RDWR)
