"""The local emulator for ``run --local`` and ``emulator``; a clear word if it is missing."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import NoReturn

from ..client import Client
from ._report import UsageError

INSTALL_HINT = "the local emulator needs werkzeug: pip install 'createos-sync[emulator]'"


def _explain_missing(exc: ModuleNotFoundError) -> NoReturn:
    if (exc.name or "").split(".")[0] == "werkzeug":
        raise UsageError(INSTALL_HINT) from None
    raise exc


def emulator_main(argv: list[str]) -> int:
    """``createos-sync emulator ARGS``: the same as ``python -m createos_sync.emulator ARGS``."""
    try:
        from ..emulator.__main__ import main
    except ModuleNotFoundError as exc:
        _explain_missing(exc)
    return main(argv)


@contextlib.contextmanager
def client(*, local: bool) -> Iterator[Client]:
    """A client from the environment, or one of an in-process emulator that ends with the block."""
    if not local:
        with Client() as remote:
            yield remote
        return
    try:
        from ..emulator import Emulator
    except ModuleNotFoundError as exc:
        _explain_missing(exc)
    with Emulator(rate_limit=None) as emulator, emulator.client() as in_process:
        yield in_process
