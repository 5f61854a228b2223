"""``%%createos`` in IPython and Jupyter: a cell run in the sandbox's interpreter.

Loaded by ``%load_ext createos_sync`` (``createos_sync.load_ipython_extension``);
IPython is imported here only, never by ``import createos_sync``.
``%%createos`` runs the cell in the default context of a lease: the one named
(``%%createos box``), else one the magic opens on first use (``createos_sync.lease()``
from the environment) and closes at ``%createos_close``, at ``%unload_ext`` or when
the kernel stops. Output is shown live; rich results are displayed inline; an
error is shown as IPython shows its own, with the sandbox's traceback.
"""

from __future__ import annotations

import atexit
import importlib
import sys
import threading
from typing import TYPE_CHECKING, Any

from ._results import CodeFailed, Result

if TYPE_CHECKING:
    from collections.abc import Callable

_lock = threading.Lock()
_opened: Any = None  # the lease the magic opened, until closed
# Given by the root package at load (``Lease`` and ``cs.lease``): they live in a layer
# above this one, which the magic's own imports must not reach.
_lease_type: type = object
_new_lease: Callable[[], Any] | None = None


def load(ipython: Any, *, lease_type: type, new_lease: Callable[[], Any]) -> None:
    global _lease_type, _new_lease
    _lease_type, _new_lease = lease_type, new_lease
    ipython.register_magic_function(_createos, magic_kind="cell", magic_name="createos")
    ipython.register_magic_function(_close, magic_kind="line", magic_name="createos_close")


def unload(ipython: Any) -> None:
    close_opened()


def close_opened() -> None:
    """Close the lease the magic opened, if it is open (``%createos_close``)."""
    global _opened
    with _lock:
        lease, _opened = _opened, None
    if lease is not None:
        lease.close()


def _lease_for(name: str) -> Any:
    if name:
        shell = importlib.import_module("IPython").get_ipython()
        found = (shell.user_ns or {}).get(name)
        if not isinstance(found, _lease_type):
            raise NameError(f"%%createos {name}: {name} is not a lease (cs.lease(...).open())")
        return found
    global _opened
    with _lock:
        if _opened is None or _opened.closed:
            if _new_lease is None:
                raise RuntimeError(
                    "%%createos: the extension is not loaded (%load_ext createos_sync)"
                )
            _opened = _new_lease().open()
            atexit.unregister(close_opened)  # once, however many leases it opens in turn
            atexit.register(close_opened)
        return _opened


def _createos(line: str, cell: str) -> None:
    """``%%createos [lease]``: run this cell in the sandbox's Python interpreter."""
    display = importlib.import_module("IPython.display").display

    def show(stream: str, data: Any) -> None:
        if isinstance(data, Result):
            display(data)
        else:
            target = sys.stdout if stream == "stdout" else sys.stderr
            target.write(data)
            target.flush()

    execution = _lease_for(line.strip()).run_code(cell, on_output=show)
    if execution.restarted:
        sys.stderr.write(
            "(the sandbox's interpreter had ended: this cell ran in a new one, "
            "without what earlier cells defined)\n"
        )
    if execution.error is not None:
        raise CodeFailed(execution)


def _close(line: str) -> None:
    """``%createos_close``: close the lease ``%%createos`` opened."""
    close_opened()
