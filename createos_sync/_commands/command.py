"""Turning a user's command into the process CreateOS starts: quoting, env, cwd, start gate.

Every managed process is ``/bin/bash -c WRAPPER``. The wrapper first waits at
a *start gate* until the client has attached the output stream, so that no
output can be written (and evicted from the 1 MiB journal) before anyone
reads it. It then takes stdin from a staged file or ``/dev/null``, changes
directory, and ``exec``s ``/bin/bash -lc SCRIPT``, where SCRIPT is the
user's string, or the user's argv quoted item by item. Per-command
variables are exported at the start of SCRIPT's first line (after the login
profile has run, so a PATH of the user's wins, and without shifting the
user's line numbers): CreateOS only accepts process-level env overrides for
keys declared at sandbox creation.
"""

from __future__ import annotations

import enum
import re
import shlex
from collections.abc import Mapping, Sequence

import attrs

from .._wire.server_text import no_surrogates

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
SHELL = "/bin/bash"
# Linux refuses any single argument longer than MAX_ARG_STRLEN (128 KiB).
MAX_WRAPPER_BYTES = 120 * 1024


class CommandTooLong(ValueError):
    """The wrapper would not fit in one argument: stage the script as a file."""


class Gate(enum.Enum):
    """How the wrapper waits for the client before starting the command."""

    # Wait for EOF on stdin; the client releases it with one stdin/close
    # request. The command's stdin is then the staged file or /dev/null.
    STDIN_EOF = "stdin_eof"
    # Wait for one line on stdin; the client releases it with one input
    # request. stdin stays open for the command (background processes).
    STDIN_LINE = "stdin_line"
    # On a terminal (stdin is the pty): the same read, released by typing
    # RELEASE_KEY with one input request. The terminal stays the command's
    # stdin, stdout and stderr.
    TERMINAL = "terminal"


RELEASE_LINE = b"\n"
# A terminal echoes what is typed, so a release line would show up in the
# command's output (and a keystroke typed after bash's `read -d` switched the
# terminal to one-character mode would too). VEOF (Ctrl-D) in the kernel's
# default canonical mode is never echoed, and is consumed whole by the read it
# ends, which then returns at once: nothing is shown, nothing is left for the
# command. (inferred: a new pty on the service starts in canonical mode, with
# VEOF = Ctrl-D, as every new Linux pty does.)
RELEASE_KEY = b"\x04"
_MARKER = "# createos-sync"
_EXEC_LINE = f"exec {SHELL} -lc "
_ARGV_EXEC = "exec "


@attrs.frozen
class Command:
    """A validated user command, ready to be wrapped."""

    args: str | tuple[str, ...]
    cwd: str | None = None
    env: Mapping[str, str] = attrs.field(factory=dict, repr=False)

    @classmethod
    def parse(
        cls,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Command:
        """Validate user input; raise ValueError (never send a request) if it is unusable."""
        args: str | tuple[str, ...]
        if isinstance(cmd, str):
            if not cmd.strip():
                raise ValueError("the command is empty")
            _no_nul(cmd, "the command")
            args = cmd
        elif isinstance(cmd, Sequence) and not isinstance(cmd, (bytes, bytearray)):
            if not cmd:
                raise ValueError("the argv list is empty")
            for i, item in enumerate(cmd):
                if not isinstance(item, str):
                    raise TypeError(f"argv item {i} is {type(item).__name__}, not str")
                _no_nul(item, f"argv item {i}")
            args = tuple(cmd)
        else:
            raise TypeError("cmd must be a str (a bash script) or a sequence of str (argv)")
        if cwd is not None:
            if not isinstance(cwd, str) or not cwd:
                raise ValueError("cwd must be a non-empty str")
            _no_nul(cwd, "cwd")
        return cls(args, cwd, validate_env(env))

    def script(self) -> str:
        """The text given to ``bash -lc``: env exports, then the user's command."""
        return self._exports() + self._body()

    def secrets(self) -> tuple[str, ...]:
        """Each env value and argv item (and ``cwd``) on its own: the wrapper sends them
        inside one script, but a service may echo any of them alone in a message."""
        items = (self.args,) if isinstance(self.args, str) else self.args
        return (*self.env.values(), *items, *((self.cwd,) if self.cwd else ()))

    def _body(self) -> str:
        return self.args if isinstance(self.args, str) else _ARGV_EXEC + shlex.join(self.args)

    def _exports(self) -> str:
        if not self.env:
            return ""
        exports = " ".join(f"{name}={shlex.quote(value)}" for name, value in self.env.items())
        return f"export {exports}; "

    def _marker(self) -> str:
        """A comment telling ``unwrap`` how to find the user's command again."""
        kind = "script" if isinstance(self.args, str) else "argv"
        return f"{_MARKER} {kind} {len(self._exports())}"

    def staged_script(self) -> str:
        """The script as a file's text, for a command too long to pass as an argument.

        It removes itself first (bash reads on from the open file), on the
        first line, so that the user's line numbers stay as they are.
        """
        return 'rm -f -- "$0"; ' + self.script()

    def wrapper(
        self, gate: Gate, stdin_path: str | None = None, script_path: str | None = None
    ) -> list[str]:
        """The ``args`` of the ``/bin/bash`` process to create.

        With ``script_path`` (where ``staged_script()`` was written), the
        script is read from that file instead of an argument: Linux caps one
        argument at 128 KiB, while a file has no such limit (the argv a
        script then execs may still total up to the kernel's ARG_MAX).
        """
        lines = []
        if gate is Gate.STDIN_EOF:
            lines.append("IFS= read -r -d '' _ || :")
            if stdin_path:
                # A sandbox whose /tmp is private under another path (the emulator
                # without isolation) names it in TMPDIR: look there as well.
                lines.append(
                    f'f={shlex.quote(stdin_path)}; [ -e "$f" ] || f="${{TMPDIR:-/tmp}}/${{f##*/}}"'
                )
                lines.append('exec 0<"$f" || exit 1')
                lines.append('rm -f -- "$f"')
            else:
                lines.append("exec 0</dev/null || exit 1")
        else:  # a line, or on a terminal VEOF: a newline delimiter keeps bash off the modes
            lines.append("IFS= read -r _ || :")
        if self.cwd is not None:
            lines.append(f"cd -- {shlex.quote(self.cwd)} || exit 1")
        if script_path is None:
            lines.append(self._marker())
            lines.append(f"{_EXEC_LINE}{shlex.quote(self.script())}")
        else:  # no marker: unwrap() cannot find the command in here, and says so
            lines.append(
                f's={shlex.quote(script_path)}; [ -e "$s" ] || s="${{TMPDIR:-/tmp}}/${{s##*/}}"'
            )
            lines.append(f'exec {SHELL} -l "$s"')
        wrapper = "\n".join(lines)
        if len(wrapper.encode("utf-8", "surrogatepass")) > MAX_WRAPPER_BYTES:
            raise CommandTooLong(
                "the command and its env are too long to pass as an argument "
                f"(over {MAX_WRAPPER_BYTES // 1024} KiB)"
            )
        return ["-c", wrapper]


def unwrap(args: Sequence[str]) -> str | tuple[str, ...] | None:
    """The user's command inside a wrapper this module built, env exports left out.

    Reattaching to a process by id reads its args back from the service: users
    want their own command there, and env values must never show. None when
    the args are not one of our wrappers.
    """
    if len(args) != 2 or args[0] != "-c":
        return None
    _, found, rest = args[1].partition(f"\n{_MARKER} ")
    marker, _, last = rest.partition("\n")  # the exec line may span lines: scripts hold newlines
    fields = marker.split()
    if not found or len(fields) != 2 or not last.startswith(_EXEC_LINE):
        return None
    try:
        [script] = shlex.split(last[len(_EXEC_LINE) :])
        body = script[int(fields[1]) :]
        if fields[0] == "argv" and body.startswith(_ARGV_EXEC):
            return tuple(shlex.split(body[len(_ARGV_EXEC) :]))
    except ValueError:
        return None
    return body if fields[0] == "script" else None


def validate_env(env: Mapping[str, str] | None) -> dict[str, str]:
    """Check names and values of per-command variables; messages never show a value."""
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError("env must be a mapping of str to str")
    checked: dict[str, str] = {}
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.match(name):
            raise ValueError(f"invalid environment variable name {name!r}")
        if not isinstance(value, str):
            raise TypeError(f"the value of environment variable {name} is not a str")
        _no_nul(value, f"the value of environment variable {name}")
        checked[name] = value
    return checked


def _no_nul(text: str, what: str) -> None:
    """Text a command may carry: no NUL, and valid Unicode (``checks.no_surrogates``)."""
    if "\0" in text:
        raise ValueError(f"{what} contains a NUL character")
    no_surrogates(what, text)
