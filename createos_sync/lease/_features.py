"""The sandbox's own state and features: info, pause and resume."""

from __future__ import annotations

import logging

from .._sandboxes import sandbox as _sandbox
from .._wire import api as _api
from ..errors import CreateosError
from ..models import SandboxInfo
from ._core import LeaseCore

log = logging.getLogger("createos_sync.lease")


class FeatureMethods(LeaseCore):
    """What a lease can ask of its sandbox besides commands and files."""

    def info(self) -> SandboxInfo:
        """Read the sandbox afresh (1 request)."""
        box = self._usable_box(paused_ok=True)
        info = SandboxInfo.from_api(_api.get_sandbox(box.transport, box.sandbox_id, box.deadline()))
        return self._saw(info)

    def pause(self) -> SandboxInfo:
        """Pause the sandbox and wait until it is paused; files and processes are kept.

        With a ttl, the watchdog is disarmed first (a paused sandbox's clock
        jumps when it resumes): 1 request more than the pause and its polls.
        """
        box = self._usable_box(paused_ok=True)
        self._watchdog.hold()
        try:
            info = _sandbox.pause(box.transport, box.sandbox_id, self._op_deadline(), box.sleep)
        except BaseException:
            try:
                self._watchdog.rearm()  # still running, most likely: keep the switch armed
            except CreateosError as exc:
                log.warning("re-arming the ttl watchdog after a failed pause failed: %s", exc)
            raise
        return self._saw(info)

    def resume(self) -> SandboxInfo:
        """Resume the sandbox and wait until it runs again.

        With a ttl, the watchdog is re-armed before this returns: 1 request
        more than the resume and its polls (for a fork made ``start_paused``,
        that request starts its watchdog: the first resume arms the ttl).
        """
        box = self._usable_box(paused_ok=True)
        info = self._saw(
            _sandbox.ensure_running(box.transport, box.sandbox_id, self._op_deadline(), box.sleep)
        )
        self._watchdog.resumed(box, self._op_deadline())
        return info
