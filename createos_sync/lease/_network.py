"""The lease's network features; the engine is ``_traffic``."""

from __future__ import annotations

from collections.abc import Sequence

from ..models import SandboxInfo
from . import _traffic as network
from ._core import LeaseCore
from ._options import check_auto_pause, check_seconds


class NetworkMethods(LeaseCore):
    """Egress rules, ingress and preview URLs, ports, auto-pause."""

    def egress(self) -> list[str]:
        """The sandbox's egress rules as the service has them now; ``[]`` allows all.

        Request budget: 1 GET. A rule the service answers in a shape that is
        not a plausible host name, wildcard or CIDR shows as "(unrecognised)".
        """
        return network.read_egress(self._usable_box(paused_ok=True), self._op_deadline())

    def set_egress(self, rules: Sequence[str] | None) -> list[str]:
        """Replace the sandbox's egress rules; returns them as the service now has them.

        ``rules`` are host names (``"pypi.org"``), wildcards (``"*.github.com"``)
        or CIDRs (``"10.0.0.0/8"``); traffic to anything else is denied. An
        empty sequence or None allows all, as at creation.

        Request budget: 1 PUT (repeated after a 5xx or a lost answer: it replaces
        the rules whole, so a repeat changes nothing).

        Raises:
            ValueError: ``rules`` is not a sequence of non-empty strings (before any request).
        """
        checked = network.check_rules(rules)
        box = self._usable_box(paused_ok=True)
        return network.replace_egress(box, checked, self._op_deadline())

    def set_ingress(self, enabled: bool) -> SandboxInfo:
        """Switch public ingress to the sandbox's ports on or off; returns the sandbox.

        Request budget: 1 PATCH.

        Raises:
            TypeError: ``enabled`` is not a bool (before any request).
        """
        network.check_enabled(enabled)
        box = self._usable_box(paused_ok=True)
        return self._saw(network.set_ingress(box, enabled, self._op_deadline()))

    def preview_url(self, port: int) -> str:
        """The public URL of ``port`` (``ingress_url_template`` with ``<port>`` replaced).

        Request budget: none: it is made from the sandbox record the lease saw
        last (at open, ``info()``, ``set_ingress``...). The server must listen
        on the sandbox's network, not only on 127.0.0.1, to be reachable on
        the service. ``wait_for_port`` says when it listens.

        Raises:
            ValueError: ingress is off, or ``port`` is outside 1..65535.
            ProtocolError: the service's URL template does not make a safe URL.
        """
        network.check_port(port)
        self._usable_box(paused_ok=True)  # a closed lease has no sandbox to preview
        return network.preview_url(self._info, port)

    def wait_for_port(self, port: int, *, timeout: float = 30.0) -> None:
        """Return once something accepts TCP connections on ``port`` inside the sandbox.

        One bash loop probes ``/dev/tcp/127.0.0.1/PORT`` in the sandbox every
        0.2 s, for at most ``timeout`` seconds (rounded up to whole seconds).

        Request budget: 1 exec, however long it waits.

        Raises:
            ValueError, TypeError: invalid ``port`` or ``timeout`` (before any request).
            OperationTimeout: nothing listened on the port in time.
        """
        network.check_port(port)
        seconds = check_seconds("timeout", timeout)
        if seconds is None:
            raise TypeError("timeout must be a number of seconds")
        network.wait_for_port(self._usable_box(), port, seconds)

    def set_auto_pause(self, seconds: int | None) -> SandboxInfo:
        """Let CreateOS pause the sandbox after ``seconds`` (60..86400) idle, or never (None).

        A paused sandbox keeps its files and frozen processes; ``resume()``
        brings it back (a lease attaching to it resumes it on ``open()``).
        Returns the sandbox.

        Request budget: 1 PATCH.

        Raises:
            ValueError: ``seconds`` is not whole seconds in 60..86400 (before any request).
        """
        checked = check_auto_pause(seconds)
        box = self._usable_box(paused_ok=True)
        return self._saw(network.set_auto_pause(box, checked, self._op_deadline()))
