"""``RunResult``: what a finished command left behind, shaped like ``CompletedProcess``."""

from __future__ import annotations

import html
import shlex
from typing import AnyStr, Generic

import attrs

from .errors import CommandFailed, CommandTimeout

_SHOWN_ARGS = 60


def describe_args(args: str | tuple[str, ...]) -> str:
    """A command, on one line and shortened, for messages and reprs."""
    text = args if isinstance(args, str) else shlex.join(args)
    text = " ".join(text.split())
    return repr(text if len(text) <= _SHOWN_ARGS else text[: _SHOWN_ARGS - 3] + "...")


@attrs.frozen(repr=False)
class RunResult(Generic[AnyStr]):
    """The outcome of one command.

    ``exit_code`` (and its alias ``returncode``) is None when the process was
    ended by a signal or by its timeout (``timed_out=True``: the default
    timeout is 300 s, and reaching it does not raise unless ``check=True``).
    ``stdout`` / ``stderr`` are ``str`` (``RunResult[str]``), or the exact
    ``bytes`` (``RunResult[bytes]``) when the command ran with ``text=False``;
    they hold at most the last ``max_output`` characters (or bytes) each;
    ``truncated`` says if any were cut.
    """

    args: str | tuple[str, ...]
    exit_code: int | None
    stdout: AnyStr
    stderr: AnyStr
    process_id: str
    signal: str | None = None
    timed_out: bool = False
    truncated: bool = False
    duration: float = 0.0
    timeout: float | None = attrs.field(default=None, eq=False)
    sandbox_id: str | None = attrs.field(default=None, eq=False)

    def where(self) -> str:
        """``process P in sandbox S``, for messages (the sandbox when known)."""
        inside = f" in sandbox {self.sandbox_id}" if self.sandbox_id else ""
        return f"process {self.process_id}{inside}"

    @property
    def returncode(self) -> int | None:
        """The exit code, as ``subprocess`` calls it."""
        return self.exit_code

    @property
    def ok(self) -> bool:
        """True when the command exited 0 within its timeout."""
        return self.exit_code == 0 and not self.timed_out

    def check(self) -> RunResult[AnyStr]:
        """Return self if ``ok``; else raise CommandTimeout or CommandFailed carrying self."""
        if self.timed_out:
            raise CommandTimeout(self, self.timeout)
        if not self.ok:
            raise CommandFailed(self)
        return self

    check_returncode = check

    def describe_args(self) -> str:
        """The command, shortened for messages."""
        return describe_args(self.args)

    def _outcome(self) -> str:
        if self.timed_out:
            if self.timeout is None:
                return "timed_out=True"
            return f"timed_out=True (timeout={self.timeout:g}s)"
        if self.signal is not None:
            return f"signal={self.signal!r}"
        return f"exit_code={self.exit_code}"

    def _size(self, data: AnyStr) -> str:
        return f"<{len(data)} {'bytes' if isinstance(data, bytes) else 'chars'}>"

    def __repr__(self) -> str:
        cut = ", truncated=True" if self.truncated else ""
        return (
            f"RunResult(args={self.describe_args()}, {self._outcome()}, "
            f"stdout={self._size(self.stdout)}, stderr={self._size(self.stderr)}{cut}, "
            f"duration={self.duration:.2f}s, process_id={self.process_id!r})"
        )

    def _repr_html_(self) -> str:
        colour = "#2e7d32" if self.ok else "#c62828"
        parts = [
            f"<div><b style='color:{colour}'>{html.escape(self._outcome())}</b> "
            f"<code>{html.escape(self.describe_args())}</code> "
            f"<small>{self.duration:.2f}s, {html.escape(self.process_id)}</small></div>"
        ]
        for name, data in (("stdout", self.stdout), ("stderr", self.stderr)):
            if data:
                tail = data[-2000:]
                shown = tail.decode("utf-8", "replace") if isinstance(tail, bytes) else tail
                size = self._size(data)[1:-1]
                parts.append(
                    f"<details><summary>{name} ({size})</summary>"
                    f"<pre>{html.escape(shown)}</pre></details>"
                )
        return "".join(parts)
