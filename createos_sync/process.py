"""Background processes: ``Process``, read like ``subprocess.Popen``, and what starts one takes.

``Lease.start`` starts a ``Process`` and ``Lease.process`` reattaches to one: it has
no public constructor. What ``stdin=`` takes is ``StdinData``; ``Size``,
``DEFAULT_SIZE``, ``DEFAULT_TERM`` and ``EOF_KEY`` describe terminals. The rules
live in ``_commands.processes`` and ``_commands.terminal``; this module names them.
"""

from __future__ import annotations

from ._commands.execution import StdinData as StdinData
from ._commands.processes import Process as Process
from ._commands.terminal import DEFAULT_SIZE as DEFAULT_SIZE
from ._commands.terminal import DEFAULT_TERM as DEFAULT_TERM
from ._commands.terminal import EOF_KEY as EOF_KEY
from ._commands.terminal import Size as Size

__all__ = ["DEFAULT_SIZE", "DEFAULT_TERM", "EOF_KEY", "Process", "Size", "StdinData"]
