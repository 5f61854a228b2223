"""Where the CLI's sandboxes come from: the account, or an in-process emulator.

A missing API key is told in the CLI's words, and a missing emulator
dependency gets an install hint.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import NoReturn

from ..client import Client
from ..config import API_KEY_ENV
from ._report import PROG, UsageError

INSTALL_HINT = "the local emulator needs werkzeug: pip install 'createos-sync[emulator]'"
NO_KEY_RUN = f"set {API_KEY_ENV}, or use --local to try the local emulator"
NO_KEY = f"set {API_KEY_ENV} (`{PROG} run --local` tries the local emulator without one)"


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
    return main(argv, prog=f"{PROG} emulator")


def account(*, missing_key: str = NO_KEY) -> Client:
    """A client of the account from the environment; a missing key is a usage error."""
    if not os.environ.get(API_KEY_ENV, "").strip():
        raise UsageError(missing_key)
    return Client()


@contextlib.contextmanager
def client(*, local: bool) -> Iterator[Client]:
    """A client from the environment, or one of an in-process emulator that ends with the block."""
    if not local:
        with account(missing_key=NO_KEY_RUN) as remote:
            yield remote
        return
    try:
        from ..emulator import Emulator
    except ModuleNotFoundError as exc:
        _explain_missing(exc)
    with Emulator(rate_limit=None) as emulator, emulator.client() as in_process:
        yield in_process
