"""This machine's request budget, and forgetting that of a service gone for good.

Every client paces its requests against one record per base URL in the state
directory, shared by the machine's processes (``Client(rate_scope=...)``). A
local emulator's URL has a port of its own each time, so its record would wait a
day to be pruned: ``forget`` drops it, and this interpreter's pacers of that URL,
when the service closes (``Emulator.close()`` calls it). The rules live in
``_wire.pacer``; this module names them.
"""

from __future__ import annotations

from ._wire.pacer import forget as forget

__all__ = ["forget"]
