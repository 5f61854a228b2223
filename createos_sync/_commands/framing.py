"""The bytes between the client and a command session's supervisor (``supervisor.sh``).

A request is one line of ASCII: fields separated by one space, each byte
outside a small safe set written as ``\\0ooo`` (``printf %b`` turns it back
into that byte), so a script, a cwd or stdin may hold any byte (stdin even
NUL) and no field ever holds a space or a newline.

The supervisor's records share the session's output streams with the
commands' own bytes: each starts with NUL RS and a token the client chose for
that request (128 random bits, never written where a command could read it),
and ends with a newline. ``RecordScanner`` splits a stream's bytes into output
and records without assuming UTF-8 or lines: output is passed on as soon as it
cannot be the start of a record, so live output waits for nothing but the few
bytes that might begin one.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterable

import attrs

SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./=+,-")
_ESCAPES = tuple(chr(byte) if byte in SAFE else f"\\0{byte:03o}" for byte in range(256))
PREFIX = b"\x00\x1e"
TOKEN_BYTES = 16
_TOKEN_CHARS = TOKEN_BYTES * 2
MAX_RECORD = 64  # prefix, token and the longest tail ("k 123456"): a longer one is output


def new_token() -> str:
    return secrets.token_hex(TOKEN_BYTES)


def field(data: bytes | None) -> str:
    """One request field: ``-`` for none, else ``:`` and the escaped bytes."""
    if data is None:
        return "-"
    return ":" + "".join([_ESCAPES[byte] for byte in data])


def run_request(
    token: str, number: int, cwd: str | None, stdin: bytes | None, script: str
) -> bytes:
    """The line that runs command ``number``."""
    cwd_bytes = None if cwd is None else cwd.encode("utf-8", "surrogateescape")
    fields = ("R", token, str(number), field(cwd_bytes), field(stdin), field(_bytes(script)))
    return " ".join(fields).encode("ascii") + b"\n"


def kill_request(token: str, number: int, grace: float) -> bytes:
    """The line that ends command ``number``'s processes: TERM, ``grace`` s, then KILL."""
    ticks = max(0, round(grace * 20))  # the supervisor waits in steps of 50 ms
    return f"K {token} {number} {ticks}\n".encode("ascii")


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogateescape")


@attrs.frozen
class SupervisorRecord:
    """A supervisor record: its token and what follows it (``x 0``, ``s 9``, ``k 0``, ``""``)."""

    token: str
    tail: str


class RecordScanner:
    """One output stream of a session: output bytes to ``emit``, records to ``on_record``.

    ``tokens`` are those of the requests in flight: a prefix followed by any
    other token is output (a command cannot know the tokens, so whatever it
    writes that looks like a record is its own output, passed on as such).
    """

    def __init__(
        self,
        tokens: Callable[[], Iterable[str]],
        emit: Callable[[bytes], None],
        on_record: Callable[[SupervisorRecord], None],
    ) -> None:
        self._tokens = tokens
        self._emit = emit
        self._on_record = on_record
        self._held = b""

    def feed(self, data: bytes) -> None:
        buffer = self._held + data if self._held else data
        self._held = b""
        start = 0
        while True:
            at = buffer.find(PREFIX[:1], start)
            if at < 0:
                break
            kept = self._at_candidate(buffer, at)
            if kept is None:  # not a record: the NUL is output
                start = at + 1
                continue
            self._pass(buffer[:at])  # the output before it comes first
            if isinstance(kept, int):  # maybe a record, not complete yet: hold it back
                self._held = buffer[at:]
                return
            end, record = kept
            self._on_record(record)
            buffer = buffer[end:]
            start = 0
        self._pass(buffer)

    def _at_candidate(self, buffer: bytes, at: int) -> tuple[int, SupervisorRecord] | int | None:
        """The record starting at ``at`` and where it ends; -1 if it may be one not yet
        complete; None if it is not a record."""
        head = buffer[at : at + 2 + _TOKEN_CHARS]
        if not PREFIX.startswith(head[:2]):
            return None
        if len(head) < 2 + _TOKEN_CHARS:
            return -1 if any(t.startswith(_text(head[2:])) for t in self._tokens()) else None
        token = _text(head[2:])
        if token not in set(self._tokens()):
            return None
        end = buffer.find(b"\n", at, at + MAX_RECORD)
        if end < 0:
            return -1 if len(buffer) - at < MAX_RECORD else None
        tail = buffer[at + 2 + _TOKEN_CHARS : end].decode("ascii", "replace").strip()
        return end + 1, SupervisorRecord(token, tail)

    def _pass(self, data: bytes) -> None:
        if data:
            self._emit(data)

    def flush(self) -> None:
        """Pass on what was held back (the stream will not complete it)."""
        held, self._held = self._held, b""
        self._pass(held)


def _text(data: bytes) -> str:
    return data.decode("ascii", "replace")


# Linux signal numbers (the sandbox's kernel), as the service names them.
SIGNALS = {
    1: "SIGHUP", 2: "SIGINT", 3: "SIGQUIT", 4: "SIGILL", 5: "SIGTRAP", 6: "SIGABRT",
    7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 10: "SIGUSR1", 11: "SIGSEGV", 12: "SIGUSR2",
    13: "SIGPIPE", 14: "SIGALRM", 15: "SIGTERM", 16: "SIGSTKFLT", 17: "SIGCHLD",
    18: "SIGCONT", 19: "SIGSTOP", 20: "SIGTSTP", 21: "SIGTTIN", 22: "SIGTTOU", 23: "SIGURG",
    24: "SIGXCPU", 25: "SIGXFSZ", 26: "SIGVTALRM", 27: "SIGPROF", 28: "SIGWINCH", 29: "SIGIO",
    30: "SIGPWR", 31: "SIGSYS",
}  # fmt: skip


def signal_name(number: int) -> str:
    return SIGNALS.get(number, f"SIGRT{number - 34}" if number >= 34 else f"SIG{number}")
