"""The sandbox's own state and features: info, pause and resume."""

from __future__ import annotations

from .. import _api, _sandbox
from ..models import SandboxInfo
from ._core import LeaseCore


class FeatureMethods(LeaseCore):
    """What a lease can ask of its sandbox besides commands and files."""

    def info(self) -> SandboxInfo:
        """Read the sandbox afresh (1 request)."""
        box = self._usable_box(paused_ok=True)
        info = SandboxInfo.from_api(_api.get_sandbox(box.transport, box.sandbox_id, box.deadline()))
        self._info = info
        return info

    def pause(self) -> SandboxInfo:
        """Pause the sandbox and wait until it is paused; files and processes are kept."""
        box = self._usable_box(paused_ok=True)
        self._info = _sandbox.pause(box.transport, box.sandbox_id, self._op_deadline(), box.sleep)
        return self._info

    def resume(self) -> SandboxInfo:
        """Resume the sandbox and wait until it runs again."""
        box = self._usable_box(paused_ok=True)
        self._info = _sandbox.ensure_running(
            box.transport, box.sandbox_id, self._op_deadline(), box.sleep
        )
        return self._info

