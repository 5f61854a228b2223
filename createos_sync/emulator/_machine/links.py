"""The wiring of private networks between sandboxes (``_state.overlays``).

- With private namespaces (``_netns``), each network is a namespace of its
  own holding a bridge; a member gets a veth pair, one end in its namespace
  (``ovlN``, with its ip on the network, ``10.89.N.K/24``), the other in the
  network's, on the bridge. Members reach each other at those ips and
  nothing else sees them: the bridge is not in the host's namespace. Made
  with iproute2 (``ip``) through ``nsenter``; destroying a sandbox removes
  its veth pairs with its namespace.
- Without them (shared mode), a member's ip is a loopback alias,
  ``127.89.N.K``: Linux routes all of 127.0.0.0/8 to loopback with no
  setup, so a server listening on ``0.0.0.0`` (or on its member ip) in one
  sandbox is reached at that ip from another. Nothing separates networks
  (or sandboxes) there: every sandbox shares the host's ports.
"""

from __future__ import annotations

import os
import shutil
import subprocess

from .netns import Network, PrivateNet, _in_thread, _make_namespace

COMMAND_TIMEOUT = 10.0


class LoopbackLinks:
    """Member ips as loopback aliases: nothing to wire."""

    def address(self, index: int, member: int) -> str:
        return f"127.89.{index}.{member}"

    def open(self, index: int) -> None:
        """Nothing to make for a network."""

    def join(self, index: int, member: int, link: int, net: Network | None) -> None:
        """Nothing to wire for a member."""

    def leave(self, index: int, net: Network | None) -> None:
        """Nothing to unwire."""

    def close(self, index: int) -> None:
        """Nothing to release."""


class BridgeLinks:
    """A bridge in a namespace per network, a veth pair per member."""

    def __init__(self) -> None:
        self._ip = shutil.which("ip") or "ip"
        self._nsenter = shutil.which("nsenter") or "nsenter"
        self._hubs: dict[int, int] = {}  # network index -> its namespace's descriptor

    def address(self, index: int, member: int) -> str:
        return f"10.89.{index}.{member}"

    def open(self, index: int) -> None:
        fd, _ = _in_thread(None, lambda: _make_namespace(False))
        try:
            self._run(fd, "link", "add", "br0", "type", "bridge")
            self._run(fd, "link", "set", "br0", "up")
        except BaseException:
            os.close(fd)
            raise
        self._hubs[index] = fd

    def join(self, index: int, member: int, link: int, net: Network | None) -> None:
        """``link`` names the bridge's end: unique, as a gone member's end may linger."""
        if not isinstance(net, PrivateNet):
            raise RuntimeError("the sandbox has no network namespace to wire")
        hub, mine, peer = self._hubs[index], f"ovl{index}", f"m{link}"
        self._run(net.fd, "link", "add", mine, "type", "veth", "peer", "name", peer,
                  "netns", f"/proc/self/fd/{hub}", extra=(hub,))  # fmt: skip
        self._run(net.fd, "addr", "add", f"{self.address(index, member)}/24", "dev", mine)
        self._run(net.fd, "link", "set", mine, "up")
        self._run(hub, "link", "set", peer, "master", "br0")
        self._run(hub, "link", "set", peer, "up")

    def leave(self, index: int, net: Network | None) -> None:
        if isinstance(net, PrivateNet):  # else destroyed: the pair went with its namespace
            self._run(net.fd, "link", "del", f"ovl{index}")

    def close(self, index: int) -> None:
        fd = self._hubs.pop(index, None)
        if fd is not None:
            os.close(fd)  # the namespace, its bridge and the members' peers go with it

    def _run(self, fd: int, *args: str, extra: tuple[int, ...] = ()) -> None:
        done = subprocess.run(
            [self._nsenter, f"--net=/proc/self/fd/{fd}", self._ip, *args],
            pass_fds=(fd, *extra),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=COMMAND_TIMEOUT,
        )
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()
            raise RuntimeError(f"ip {args[0]} {args[1]} failed: {why}")


class MissingLinks(LoopbackLinks):
    """Private namespaces without iproute2: loopback aliases would not cross them."""

    def open(self, index: int) -> None:
        raise RuntimeError(
            "private networks between sandboxes need iproute2's `ip` and `nsenter` here "
            "(apt-get install iproute2 util-linux), or an emulator with network='shared'"
        )


Links = LoopbackLinks | BridgeLinks | MissingLinks


def choose(network_mode: str) -> Links:
    """Bridges where sandboxes have namespaces of their own; loopback aliases where they
    share the host's network."""
    if network_mode != "private":
        return LoopbackLinks()
    if shutil.which("ip") and shutil.which("nsenter"):
        return BridgeLinks()
    return MissingLinks()
