"""Where a sandbox's network lives, and where its guest agent listens.

Two modes (``Emulator.network`` says which one is in use):

- ``private``: each sandbox has a network namespace of its own, with its own
  loopback, so that ``http://127.0.0.1:1029`` inside it is its own guest
  agent, as on the service, and its ports are its own (two sandboxes may
  listen on the same one; the host reaches them only through preview URLs).
  Egress goes through ``slirp4netns``, a user-mode NAT: commands reach
  whatever the host reaches (``pip install`` works where it worked before),
  the host's own loopback as ``10.0.2.2``, and DNS at ``10.0.2.3`` (bound
  over the sandbox's ``/etc/resolv.conf``). It needs bubblewrap isolation,
  the right to make network namespaces (root, or CAP_SYS_ADMIN) and the
  ``slirp4netns`` program.
- ``shared``: the host's network (plain mode, or where the above is missing).
  Each sandbox's agent listens on a free port of the host's loopback, named
  to its processes in ``CREATEOS_AGENT_URL`` (which the SDK's ttl watchdog
  honours; code that hard-wires ``127.0.0.1:1029`` finds no agent there).

Namespaces are switched per thread: ``setns`` and ``unshare`` of a network
namespace change only the calling thread, and a socket stays in the
namespace it was made in wherever it is used later. A namespace is made by a
short-lived thread that unshares, keeps a descriptor of it, brings loopback
up and binds the agent's socket there. The emulator's one spawner thread
joins a sandbox's namespace around each ``Popen`` (``entered``) and goes back
at once, so every command of the sandbox, bubblewrap and all, starts inside;
the ingress proxy reaches a sandbox's port with a socket made inside it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import logging
import os
import select
import shutil
import socket
import struct
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from . import listeners as _listeners
from .isolation import Isolation

log = logging.getLogger("createos_sync.emulator")

AGENT_PORT = 1029
SLIRP_DNS = "10.0.2.3"
SLIRP_READY_TIMEOUT = 10.0
CLONE_NEWNET = 0x40000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
UNPRIVILEGED_PORTS = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
IFREQ = "16sh22x"  # struct ifreq: the name, then the flags in its union

T = TypeVar("T")


class SharedNet:
    """The host's network; the agent on a free loopback port named in ``CREATEOS_AGENT_URL``."""

    def __init__(self, *, agent: bool = True) -> None:
        self.agent: socket.socket | None = None
        self.env: dict[str, str] = {}
        if agent:
            self.agent = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.agent.bind(("127.0.0.1", 0))
            self.agent.listen(16)
            self.env["CREATEOS_AGENT_URL"] = f"http://127.0.0.1:{self.agent.getsockname()[1]}"

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        yield

    def create_connection(self, address: tuple[str, int], timeout: float) -> socket.socket:
        return socket.create_connection(address, timeout)

    def close(self) -> None:
        """Nothing of its own to release: the agent's socket belongs to ``GuestAgents``."""


class PrivateNet:
    """One sandbox's network namespace: loopback, the agent at 127.0.0.1:1029, slirp4netns."""

    def __init__(self, slirp: str, home: int, *, agent: bool = True) -> None:
        self.env: dict[str, str] = {}  # 127.0.0.1:1029 is the agent, as on the service
        self._home = home
        self.fd, self.agent = _in_thread(None, lambda: _make_namespace(agent))
        try:
            self._exit_w, self._slirp = _start_slirp(slirp, self.fd)
        except BaseException:
            if self.agent is not None:
                self.agent.close()
            os.close(self.fd)
            raise

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread inside this namespace for the block (the spawner's ``Popen``)."""
        _setns(self.fd)
        try:
            yield
        finally:
            _setns(self._home)

    def create_connection(self, address: tuple[str, int], timeout: float) -> socket.socket:
        """A TCP connection to ``address`` as seen from inside the sandbox."""
        sock = _in_thread(self.fd, lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        try:
            sock.settimeout(timeout)
            sock.connect(address)
        except BaseException:
            sock.close()
            raise
        return sock

    def listeners(self, port: int) -> list[_listeners.Listener]:
        """The sockets listening on ``port`` inside the sandbox."""
        return _in_thread(self.fd, lambda: _listeners.listeners(port, "/proc/thread-self/net"))

    def close(self) -> None:
        os.close(self._exit_w)  # slirp4netns exits when this closes
        try:
            self._slirp.wait(5)
        except subprocess.TimeoutExpired:
            self._slirp.kill()
            self._slirp.wait()
        os.close(self.fd)


Network = SharedNet | PrivateNet


class Networks:
    """Makes each sandbox's network, in the mode chosen once at start."""

    def __init__(self, mode: str, isolation: Isolation) -> None:
        self._slirp = shutil.which("slirp4netns") or ""
        self._home = -1
        self.name = "shared"
        if mode == "shared":
            return
        why = self._unavailable(isolation)
        if why is None:
            self.name = "private"
            self._bind_resolver(isolation)
            return
        if mode == "private":
            raise RuntimeError(f"network='private' was asked for, but {why}")
        log.warning(
            "sandboxes share the host's network (%s): each one's guest agent is named "
            "in CREATEOS_AGENT_URL, not at 127.0.0.1:1029",
            why,
        )

    def create(self, *, agent: bool = True) -> Network:
        """A sandbox's network; without ``agent`` (a template build's), nothing at port 1029."""
        if self.name == "private":
            return PrivateNet(self._slirp, self._home, agent=agent)
        return SharedNet(agent=agent)

    def close(self) -> None:
        if self._home >= 0:
            os.close(self._home)
            self._home = -1

    def _unavailable(self, isolation: Isolation) -> str | None:
        """Why private namespaces cannot be had here, or None once one was made and dropped."""
        if isolation.name != "bwrap":
            return "a private network needs bubblewrap isolation"
        if not sys.platform.startswith("linux"):
            return "network namespaces are Linux's"
        if not self._slirp:
            return "slirp4netns (which gives a private network its egress) is not installed"
        self._home = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            PrivateNet(self._slirp, self._home, agent=False).close()
        except (OSError, RuntimeError) as exc:
            os.close(self._home)
            self._home = -1
            return f"a network namespace could not be made ({exc})"
        return None

    @staticmethod
    def _bind_resolver(isolation: Isolation) -> None:
        """Point the sandboxes' DNS at slirp4netns, which forwards it to the host's resolver;
        each sandbox gets its own copies of ``resolv.conf`` and ``hosts``."""
        for target, text in (("/etc/resolv.conf", f"nameserver {SLIRP_DNS}\n"),
                             ("/etc/hosts", None)):  # fmt: skip
            if os.path.islink(target) or not os.path.isfile(target):
                continue  # nothing to bind over (bubblewrap would follow a link out of /etc)
            if text is None:
                text = Path(target).read_text(errors="replace")
            isolation.copy_over(target, text)  # type: ignore[union-attr]


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _setns(fd: int) -> None:
    _check(_libc().setns(fd, CLONE_NEWNET), "setns")


def _in_thread(netns: int | None, action: Callable[[], T]) -> T:
    """``action()`` on a short-lived thread in namespace ``netns`` (None: a new one)."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            if netns is None:
                _check(_libc().unshare(CLONE_NEWNET), "unshare")
            else:
                _setns(netns)
            outcome["value"] = action()
        except BaseException as exc:  # handed to the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=run, name="emulator-netns", daemon=True)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]


def _make_namespace(agent: bool) -> tuple[int, socket.socket | None]:
    """In a fresh namespace: a descriptor of it, loopback up, the agent's listening socket."""
    fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            asked = fcntl.ioctl(probe, SIOCGIFFLAGS, struct.pack(IFREQ, b"lo", 0))
            flags = struct.unpack(IFREQ, asked)[1]
            fcntl.ioctl(probe, SIOCSIFFLAGS, struct.pack(IFREQ, b"lo", flags | IFF_UP))
        # Sandboxed root has no CAP_NET_BIND_SERVICE: let it serve on port 80 all the same
        # (this namespace's own setting; this thread's /proc/sys/net is the namespace's).
        with contextlib.suppress(OSError), open(UNPRIVILEGED_PORTS, "w") as setting:
            setting.write("0\n")
        if not agent:
            return fd, None
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", AGENT_PORT))
        listener.listen(16)
    except BaseException:
        os.close(fd)
        raise
    return fd, listener


def _start_slirp(slirp: str, netns: int) -> tuple[int, subprocess.Popen[bytes]]:
    """slirp4netns for ``netns``, configured; (the fd whose closing ends it, its process)."""
    ready_r, ready_w = os.pipe()
    exit_r, exit_w = os.pipe()
    try:
        process = subprocess.Popen(
            [slirp, "--configure", "--mtu=65520", f"--ready-fd={ready_w}",
             f"--exit-fd={exit_r}", "--netns-type=path", f"/proc/self/fd/{netns}", "tap0"],
            pass_fds=(ready_w, exit_r, netns),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
    except BaseException:
        for fd in (ready_r, ready_w, exit_r, exit_w):
            os.close(fd)
        raise
    os.close(ready_w)
    os.close(exit_r)
    try:
        readable, _, _ = select.select([ready_r], [], [], SLIRP_READY_TIMEOUT)
        ready = os.read(ready_r, 1) if readable else b""
    finally:
        os.close(ready_r)
    if ready != b"1":
        os.close(exit_w)
        process.kill()
        raise RuntimeError(f"slirp4netns did not start (exit status {process.wait()})")
    return exit_w, process
