"""This machine's lease journal, and reaping what dead leases left behind.

Every lease records the sandbox it creates in the journal (a file in the
state directory) until the sandbox is destroyed or deliberately kept; an
entry whose owner died names a sandbox that may still be running and billed.
``reap`` destroys those (``createos-sync reap`` is it); ``Journal().entries()``
lists what is recorded (``createos-sync ls`` marks orphans with it).
``Account`` is what ``reap`` needs of its client (a ``Client`` is one). The
rules live in ``_sandboxes.journal`` and ``_sandboxes.reap``; this module
names them for front ends.
"""

from __future__ import annotations

from ._sandboxes.journal import Entry as Entry
from ._sandboxes.journal import Journal as Journal
from ._sandboxes.reap import Account as Account
from ._sandboxes.reap import Reaped as Reaped
from ._sandboxes.reap import reap as reap

__all__ = ["Account", "Entry", "Journal", "Reaped", "reap"]
