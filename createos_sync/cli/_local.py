"""Where the CLI's sandboxes come from: the account, or a local emulator.

``--local`` means the standalone emulator that ``createos-sync emulator``
serves (found through its record, see ``createos_sync.standalone``); ``run`` and
``shell`` fall back to an in-process one that ends with the command. A
missing API key is told in the CLI's words, and a missing emulator
dependency gets an install hint.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from typing import NoReturn

from ..client import Client
from ..config import API_KEY_ENV, env_api_key
from ..standalone import choice_note, find
from ._report import PROG, UsageError, say

INSTALL_HINT = "the local emulator needs werkzeug: pip install 'createos-sync[emulator]'"
NO_KEY_RUN = f"set {API_KEY_ENV}, or use --local to try the local emulator"
NO_KEY = (
    f"set {API_KEY_ENV}, or add --local to use the emulator that `{PROG} emulator` serves "
    "(in another terminal)"
)
NO_EMULATOR = (
    f"no local emulator is serving: start one with `{PROG} emulator` in another terminal "
    "(`run --local` and `shell --local` need none)"
)


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


def account(*, local: bool = False, missing_key: str = NO_KEY) -> Client:
    """A client of the account from the environment (a missing key is a usage error),
    or with ``local`` of the standalone emulator (none serving is a usage error)."""
    if local:
        standalone = _standalone_client()
        if standalone is None:
            raise UsageError(NO_EMULATOR)
        return standalone
    if env_api_key() is None:
        serving = find()
        raise UsageError(missing_key + (f" (one serves at {serving.url})" if serving else ""))
    return Client()


def add_local_flag(parser: argparse.ArgumentParser) -> None:
    """``--local`` for a command that needs the standalone emulator (its state lives there)."""
    parser.add_argument(
        "--local",
        action="store_true",
        help=f"use the emulator that `{PROG} emulator` serves (in another terminal; no account)",
    )


def in_process(*, local: bool) -> bool:
    """Whether ``client(local=local)`` makes an in-process emulator (none serves standalone)."""
    return local and find() is None


def _standalone_client() -> Client | None:
    """A client of the newest standalone emulator; which one is said when several serve."""
    found = find()
    if found is None:
        return None
    note = choice_note(found)
    if note is not None:
        say(note)
    return Client(found.api_key, found.url, ca_bundle=found.ca_bundle)


@contextlib.contextmanager
def client(*, local: bool) -> Iterator[Client]:
    """A client from the environment; with ``local``, one of the standalone emulator if one
    serves, else of an in-process emulator that ends with the block."""
    if not local:
        with account(missing_key=NO_KEY_RUN) as remote:
            yield remote
        return
    standalone = _standalone_client()
    if standalone is not None:
        with standalone:
            yield standalone
        return
    try:
        from ..emulator import Emulator
    except ModuleNotFoundError as exc:
        _explain_missing(exc)
    with Emulator(rate_limit=None) as emulator, emulator.client() as in_process:
        yield in_process
