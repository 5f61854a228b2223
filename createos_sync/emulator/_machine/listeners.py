"""Which process listens on a TCP port, read from /proc: what "a sandbox's port" means here.

In the emulator's shared network mode (``_netns``), sandboxes use the
host's network: a port that a sandboxed server listens on is a port of the
host, so two sandboxes cannot listen on the same one at once, and a
host service on port N looks just like a sandbox's port N. The ingress
proxy therefore forwards only to a listener whose socket is held open by a
process of that very sandbox: it looks the port's listening sockets up in
``/proc/net/tcp`` and ``tcp6`` (inode and bound address), and the sandbox's
processes up in ``/proc/PID/fd``. In the private mode, a sandbox's
namespace holds its own listeners only: nothing needs checking there.

Two sockets may listen on one port at once (``SO_REUSEPORT``, same
user), and the kernel spreads connections over them: the proxy forwards
only while every listener on the port is the sandbox's own, else a host
service sharing the port would receive preview traffic. A listener may join
at any time, so the port's listeners are listed for every request, by the
kernel's ``sock_diag`` (0.3 ms here), else from ``/proc/net/tcp`` (19 ms
here, with 156 sockets: reading it walks every bucket of the hash tables).
The owner, once found, is remembered as (pid, fd, inode) and checked again
with one ``readlink`` instead of a scan of every process's descriptors:
while that descriptor still holds that socket, and it is the port's only
listener, the port is still the sandbox's alone.

Without ``/proc/net`` (not Linux) ownership cannot be checked: the proxy
then forwards to the loopback port as it is (``Listener.unchecked``).
"""

from __future__ import annotations

import ipaddress
import os
import socket
import struct
from collections.abc import Iterable
from dataclasses import dataclass

PROC_NET = "/proc/net"
LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's "st" column
TCP_LISTEN = 10
NETLINK_SOCK_DIAG, SOCK_DIAG_BY_FAMILY = 4, 20
DUMP = 0x301  # NLM_F_REQUEST | NLM_F_DUMP
NLMSG_ERROR, NLMSG_DONE = 2, 3


@dataclass(frozen=True)
class Listener:
    """A listening socket: where to connect to reach it, and its inode (None: unchecked)."""

    host: str
    port: int
    inode: int | None

    @classmethod
    def unchecked(cls, port: int) -> Listener:
        return cls("localhost", port, None)


def can_check() -> bool:
    return os.path.isfile(f"{PROC_NET}/tcp")


def listeners(port: int, proc_net: str = PROC_NET) -> list[Listener]:
    """The sockets listening on ``port`` (IPv4 and IPv6), in the calling thread's network
    namespace: asked of the kernel (``sock_diag``), else read from ``proc_net``.

    A sandbox's private network namespace is read, from a thread inside it,
    at ``/proc/thread-self/net`` (``/proc/net`` shows the main thread's).
    """
    try:
        return [found for found in _diagnosed() if found.port == port]
    except (OSError, AttributeError):  # AttributeError: no AF_NETLINK
        pass
    found = []
    for table, decode in (("tcp", _ipv4), ("tcp6", _ipv6)):
        try:
            with open(f"{proc_net}/{table}", encoding="ascii") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != LISTEN:
                continue
            address, _, hex_port = fields[1].partition(":")
            if int(hex_port, 16) == port:
                found.append(Listener(_reachable(decode(address)), port, int(fields[9])))
    return found


def _diagnosed() -> list[Listener]:
    """Every listening TCP socket, from the kernel's ``sock_diag`` netlink interface: it
    walks the listening sockets only, where ``/proc/net/tcp`` walks every hash bucket."""
    found: list[Listener] = []
    with socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, NETLINK_SOCK_DIAG) as diag:
        for family in (socket.AF_INET, socket.AF_INET6):
            request = struct.pack("=BBBBI48x", family, socket.IPPROTO_TCP, 0, 0, 1 << TCP_LISTEN)
            header = struct.pack("=IHHII", 16 + len(request), SOCK_DIAG_BY_FAMILY, DUMP, 1, 0)
            diag.send(header + request)
            found += _answers(diag, family)
    return found


def _answers(diag: socket.socket, family: int) -> list[Listener]:
    found: list[Listener] = []
    while True:
        data = diag.recv(1 << 16)
        offset = 0
        while offset + 16 <= len(data):
            length, kind = struct.unpack_from("=IH", data, offset)
            if kind == NLMSG_DONE:
                return found
            if kind == NLMSG_ERROR or length < 16:
                raise OSError("sock_diag refused the request")
            message = data[offset + 16 : offset + length]
            port = struct.unpack_from("!H", message, 4)[0]
            raw = message[8 : 12 if family == socket.AF_INET else 24]
            address = ipaddress.ip_address(raw)
            if isinstance(address, ipaddress.IPv6Address):
                address = address.ipv4_mapped or address
            inode = struct.unpack_from("=I", message, 68)[0]
            found.append(Listener(_reachable(address), port, inode))
            offset += (length + 3) & ~3


@dataclass(frozen=True)
class Owner:
    """The descriptor through which a process holds a listening socket."""

    listener: Listener
    pid: int
    fd: int

    def still_holds(self) -> bool:
        try:
            return os.readlink(f"/proc/{self.pid}/fd/{self.fd}") == _link(self.listener.inode)
        except OSError:
            return False


def owner(found: list[Listener], pids: Iterable[int]) -> Owner | None:
    """One of ``found`` that one of the processes ``pids`` holds open, if any: and only if
    they hold every one of ``found`` (no other program listens on that port)."""
    by_link = {_link(listener.inode): listener for listener in found}
    held: dict[str, Owner] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue  # gone meanwhile
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link in by_link:
                held.setdefault(link, Owner(by_link[link], pid, int(fd)))
    if not held or len(held) < len(by_link):
        return None
    return next(iter(held.values()))


def _link(inode: int | None) -> str:
    return f"socket:[{inode}]"


def _ipv4(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.IPv4Address(bytes.fromhex(hex_address)[::-1])


def _ipv6(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    raw = bytes.fromhex(hex_address)
    # Four 32-bit words, each in host (little-endian) order.
    address = ipaddress.IPv6Address(b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4)))
    return address.ipv4_mapped or address


def _reachable(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Where the proxy connects: the bound address, or its family's loopback for a wildcard."""
    if address.is_unspecified:
        return "127.0.0.1" if address.version == 4 else "::1"
    return str(address)
