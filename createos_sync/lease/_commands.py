"""The lease's commands: ``run`` to completion, ``start`` in the background, reattach.

The engine is ``createos_sync.process``; these methods validate arguments
(before any request) and hand over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from .. import files, process
from .._command import Command
from .._options import check_seconds
from .._output import Capture, fan_out
from .._output import echo as echo_output
from ..result import RunResult
from ._core import LeaseCore

DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024


class CommandMethods(LeaseCore):
    """``run``, ``start`` and ``process``."""

    def run(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: process.StdinData | None = None,
        timeout: float | None = None,
        check: bool = False,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> RunResult:
        """Run a command to completion in the sandbox and return its ``RunResult``.

        A ``str`` runs as a bash script (``bash -lc``); a sequence runs as argv,
        each item quoted. The process waits at a start gate until its output
        stream is attached, so nothing it writes is lost. On timeout the
        process tree is terminated and the result has ``timed_out=True``.
        Ctrl-C terminates the process tree, then re-raises; a second Ctrl-C
        meanwhile destroys the sandbox.

        Request budget: 3 (create, output stream, start-gate release), plus 1
        upload when ``stdin`` is given, plus reconnections of a dropped stream.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            CommandFailed, CommandTimeout: with ``check=True``.
            OutputLostError: output was evicted before it could be read.
            CreateosCleanupError: the lease is poisoned by an unconfirmed cleanup.
            LeaseClosed: the lease is not open.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        process.validate_stdin(stdin)
        _check_output_options(max_output, on_output)
        limit = check_seconds("timeout", timeout) or self._command_timeout()
        box = self._usable_box()
        result = process.run(
            box,
            command,
            stdin=stdin,
            timeout=limit,
            capture=Capture(max_output),
            deliver=fan_out(on_output, echo_output if echo else None),
            escalate=self._destroy_now,
        )
        return result.check() if check else result

    def start(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: process.StdinData | None = None,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> process.Process:
        """Start a command in the background and return its ``Process``.

        Without ``stdin`` the process's stdin stays open for ``send()`` until
        ``close_stdin()``. Returns once the output stream is attached and the
        command released. Request budget: 3, like ``run()``.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        process.validate_stdin(stdin)
        _check_output_options(max_output, on_output)
        return process.start(
            self._usable_box(),
            command,
            stdin=stdin,
            max_output=max_output,
            on_output=on_output,
            echo=echo_output if echo else None,
        )

    def process(
        self,
        process_id: str,
        *,
        on_output: Callable[[str, str], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> process.Process:
        """Reattach to a process of this sandbox by id (after a kernel restart, say).

        Its output is replayed from whatever the journal still holds. If it is
        still running, it is terminated when this lease closes.
        """
        if not isinstance(process_id, str) or not process_id:
            raise ValueError("process_id must be a non-empty str")
        _check_output_options(max_output, on_output)
        return process.reattach(
            self._usable_box(),
            process_id,
            max_output=max_output,
            on_output=on_output,
            echo=echo_output if echo else None,
        )

    def _housekeeping_run(self, argv: list[str]) -> RunResult:
        return self.run(argv, max_output=files.HOUSEKEEPING_OUTPUT)



def _check_output_options(max_output: int, on_output: object) -> None:
    if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 0:
        raise ValueError("max_output must be an int >= 0")
    if on_output is not None and not callable(on_output):
        raise TypeError("on_output must be callable")
