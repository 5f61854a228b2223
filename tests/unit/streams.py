"""Stand-ins for sys.stderr: a terminal, and a Jupyter kernel's stream."""

from __future__ import annotations

import io


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class KernelStream(io.StringIO):
    """What a Jupyter kernel puts in sys.stderr (its class lives in ipykernel)."""


KernelStream.__module__ = "ipykernel.iostream"
