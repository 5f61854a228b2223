"""How the CLI speaks to its user: one-line messages, errors, exit statuses.

Expected failures (bad configuration, API errors, unconfirmed cleanup, local
file errors, interrupts) become one readable message on stderr and an exit
status; the traceback is shown only with ``--debug``. Anything else is a bug
and keeps its traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator

from ..errors import ConfigError, CreateosError
from ._signals import exit_status

PROG = "createos-sync"
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `cmd | head`


class UsageError(Exception):
    """The command line asks for something that cannot be done (exit status 2).

    ``hint``, when given, is printed on a line of its own after the message
    (for example "see `createos-sync run --help`").
    """

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


def say(message: str) -> None:
    """A message of the CLI itself, on stderr (stdout belongs to the command)."""
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def delete_each(
    ids: Iterable[str],
    delete: Callable[[str], bool],
    *,
    doing: str,
    done: str,
    gone: Callable[[str], str | None],
    never_seen: str,
    then: Callable[[str], None] | None = None,
) -> int:
    """``delete(id)`` for each id in turn (True: it existed), saying what became of each,
    then ``then(id)``; a failure is said and the next id tried. An id that was not there
    is "already gone" when ``gone(id)`` says how it went, else ``never_seen`` (formatted
    with ``id``): a typo is not a success. The exit status: 0, 2 if an id was never
    seen, 1 if a deletion failed (which says more)."""
    status = 0
    for one in ids:
        try:
            existed = delete(one)
            how = None if existed else gone(one)
        except CreateosError as exc:
            say(f"{doing} {one} failed: {exc}")
            status = EXIT_FAILURE
            continue
        if existed:
            print(f"{done} {one}", flush=True)
        elif how is not None:
            print(f"{one} is already gone ({how})", flush=True)
        else:
            say(never_seen.format(id=one))
            status = status or EXIT_USAGE
        if then is not None:
            then(one)
    return status


def _explain(exc: BaseException) -> str:
    notes = [n for n in getattr(exc, "__notes__", ()) if isinstance(n, str)]
    return "\n".join([str(exc) or type(exc).__name__, *notes])


def _report(prefix: str, exc: BaseException, *, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    say(f"{prefix}{_explain(exc)}")


def say_failure(what: str, exc: BaseException, *, debug: bool) -> None:
    """``what`` failed (``exc`` says why), the run goes on; the traceback with ``--debug``."""
    _report(f"{what} failed: ", exc, debug=debug)


def guarded(action: Callable[[], int], *, debug: bool) -> int:
    """Run ``action`` and turn the failures a user can meet into a message and a status."""
    try:
        return action()
    except UsageError as exc:
        _report("error: ", exc, debug=debug)
        if exc.hint:
            print(exc.hint, file=sys.stderr, flush=True)
        return EXIT_USAGE
    except ConfigError as exc:
        _report("configuration error: ", exc, debug=debug)
        return EXIT_USAGE
    except CreateosError as exc:  # a 401's message says "the API key was rejected" itself
        _report("error: ", exc, debug=debug)
        return EXIT_FAILURE
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except OSError as exc:
        _report("error: ", exc, debug=debug)
        return EXIT_FAILURE
    except KeyboardInterrupt as exc:
        if sys.stderr.isatty():  # the terminal has just echoed ^C without a line break
            print(file=sys.stderr)
        _report("interrupted: ", exc, debug=debug)
        return exit_status(exc)


def _silence_stdout() -> None:
    """Whoever read our stdout has gone: keep the interpreter's final flush from failing."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())


class _WarningsOnly(logging.Filter):
    """Errors reach the user as exceptions (never hidden); logging them too would repeat them."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR


@contextlib.contextmanager
def logging_to_stderr(*, debug: bool) -> Iterator[None]:
    """Show the SDK's warnings (everything, with ``--debug``) on stderr while the CLI works,
    and every wait for the request budget (``createos_sync.budget`` at INFO: one line a wait)."""
    budget = logging.getLogger("createos_sync.budget")
    previous_budget = budget.level
    budget.setLevel(logging.DEBUG if debug else logging.INFO)
    logger = logging.getLogger("createos_sync")
    handler = logging.StreamHandler(sys.stderr)
    if debug:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        level = logging.DEBUG
    else:
        handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
        handler.addFilter(_WarningsOnly())
        level = logging.WARNING
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        budget.setLevel(previous_budget)
