"""A command in flight in a command session: its token, its sinks, what the supervisor said.

Output bytes go to the command's ``Output`` as they came (it captures and decodes them);
records set the command's end, its status, and a kill's report.
"""

from __future__ import annotations

from ..errors import OutputLostError
from . import framing
from .output import Output


class InFlight:
    """The command in flight: its token, its sinks, and what the supervisor said of it."""

    def __init__(self, token: str, output: Output) -> None:
        self.token = token
        self.kill_token: str | None = None
        self.output = output
        self.stdout_end: str | None = None  # "x CODE" or "s SIGNUM"
        self.stderr_ended = False
        self.killed_left: int | None = None
        self.accepted = False  # the supervisor read it: it may have run
        self.never_ran = False  # a kill's report: its request never reached the supervisor

    def tokens(self) -> tuple[str, ...]:
        return (self.token,) if self.kill_token is None else (self.token, self.kill_token)

    @property
    def done(self) -> bool:
        return self.stdout_end is not None and self.stderr_ended

    def take(self, stream: str, data: bytes) -> None:
        if stream == "stdout" and self.stdout_end is not None:
            return  # after the end record: a late kill report's neighbours, never output
        if stream == "stderr" and self.stderr_ended:
            return
        self.output.write(stream, data)

    def record(self, stream: str, record: framing.SupervisorRecord) -> None:
        if record.token == self.kill_token and record.tail.startswith("k "):
            left, _, never = record.tail[2:].partition(" ")
            self.killed_left = _int(left, default=1)
            self.never_ran = never == "never"
        elif record.token == self.token and stream == "stderr":
            self.stderr_ended = True
        elif record.token == self.token and stream == "stdout" and record.tail == "a":
            self.accepted = True
        elif record.token == self.token and stream == "stdout" and self.stdout_end is None:
            self.stdout_end = record.tail

    def status(self) -> tuple[int | None, str | None]:
        kind, _, value = (self.stdout_end or "").partition(" ")
        number = _int(value, default=-1)
        if kind == "s" and number > 0:
            return None, framing.signal_name(number)
        if kind == "x" and number >= 0:
            return number, None
        raise OutputLostError(f"the command session gave an unreadable status ({kind!r})")

    def flush(self) -> None:
        self.output.end()


def _int(text: str, *, default: int) -> int:
    return int(text) if text.isdigit() else default
