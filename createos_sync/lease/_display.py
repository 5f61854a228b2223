"""How a lease shows itself: ``repr()``, and a table in Jupyter."""

from __future__ import annotations

import html
import time

from ._core import LeaseCore


class DisplayMethods(LeaseCore):
    """The lease's ``repr`` and its HTML form."""

    def __repr__(self) -> str:
        running = len(self._box.table.unfinished()) if self._box is not None else 0
        return (
            f"<Lease {self.id or '(no sandbox yet)'} status={self.status} "
            f"on_exit={self._on_exit} processes={running}>"
        )

    def _repr_html_(self) -> str:
        age = f"{time.monotonic() - self._opened_at:.0f}s" if self._opened_at else "-"
        running = len(self._box.table.unfinished()) if self._box is not None else 0
        rows = [
            ("sandbox", self.id or "-"),
            ("status", self.status or "-"),
            ("age", age),
            ("on exit", self._on_exit),
            ("running processes", str(running)),
        ]
        cells = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
            for k, v in rows
        )
        return f"<table><caption>CreateOS lease</caption>{cells}</table>"
