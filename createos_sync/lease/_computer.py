"""The lease's desktop; the engine is ``createos_sync.computer``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._core import LeaseCore

if TYPE_CHECKING:
    from ..computer import Computer


class ComputerMethods(LeaseCore):
    """``box.computer``: the screen, mouse, keyboard, clipboard and windows of a desktop."""

    @property
    def computer(self) -> Computer:
        """The sandbox's desktop (a desktop image such as ``desktop:1``): screenshots, mouse,
        keyboard, clipboard, windows and screens. No request until a method is called;
        each method checks the lease is open (and its sandbox running) first."""
        from ..computer import Computer  # imported at first use, not with the package

        return Computer._create(self._usable_box, self._op_deadline)
