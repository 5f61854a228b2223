"""The lease's commands: ``run`` to completion, ``start`` in the background, reattach.

The engines are ``createos_sync._commands.execution`` (run to the end) and
``createos_sync._commands.processes`` (background processes); these methods validate arguments
(before any request) and hand over.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, overload

from .. import _files as files
from .. import process
from .._commands import execution as _execution
from .._commands import processes as _processes
from .._commands import session as _session
from .._commands.command import Command
from .._commands.output import Output
from .._commands.output import echo as echo_output
from .._commands.terminal import Size, on_terminal, terminal_size
from ..cancel import Cancel
from ..errors import RunCancelled
from ..result import RunResult
from ._core import LeaseCore
from ._options import check_seconds

DEFAULT_MAX_OUTPUT = 4 * 1024 * 1024
OnText = Callable[[str, str], None]
OnBytes = Callable[[str, bytes], None]
Stdin = process.StdinData
Cmd = str | Sequence[str]
Env = Mapping[str, str] | None


class CommandMethods(LeaseCore):
    """``run``, ``start`` and ``process``."""

    # The result's type follows ``text``, as ``subprocess.run``'s does.
    @overload
    def run(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., timeout: float | None = ..., check: bool = ...,
        on_output: OnText | None = ..., echo: bool = ..., max_output: int = ...,
        pty: bool | tuple[int, int] | None = ..., text: Literal[True] = ...,
        cancel: Cancel | None = ...,
    ) -> RunResult[str]: ...  # fmt: skip
    @overload
    def run(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., timeout: float | None = ..., check: bool = ...,
        on_output: OnBytes | None = ..., echo: bool = ..., max_output: int = ...,
        pty: bool | tuple[int, int] | None = ..., text: Literal[False],
        cancel: Cancel | None = ...,
    ) -> RunResult[bytes]: ...  # fmt: skip
    @overload
    def run(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., timeout: float | None = ..., check: bool = ...,
        on_output: Callable[[str, Any], None] | None = ..., echo: bool = ...,
        max_output: int = ..., pty: bool | tuple[int, int] | None = ..., text: bool = ...,
        cancel: Cancel | None = ...,
    ) -> RunResult[Any]: ...  # fmt: skip
    def run(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Stdin | None = None,
        timeout: float | None = None,
        check: bool = False,
        on_output: Callable[[str, Any], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
        pty: bool | tuple[int, int] | None = None,
        text: bool = True,
        cancel: Cancel | None = None,
    ) -> RunResult[Any]:
        r"""Run a command to completion in the sandbox and return its ``RunResult``.

        The command runs in the lease's command session (a supervisor
        process the first ``run()`` starts, whose output stream stays
        attached): nothing it writes is lost, and a dropped stream is
        reattached without duplicates or gaps. Ctrl-C or the timeout ends
        the command's whole process tree (``setsid`` and double forks
        included) and confirms it, else terminates the session, else the
        lease is poisoned; then re-raises. A second Ctrl-C meanwhile destroys
        the sandbox. Sessions end with the lease.

        Args:
            cmd: a ``str`` runs as a bash script (``bash -lc``); a sequence
                of ``str`` runs as argv, each item shell-quoted.
            cwd: the working directory (default: the sandbox's own).
            env: variables for this command only; names match
                ``[A-Za-z_][A-Za-z0-9_]*``, values may hold anything but NUL.
            stdin: ``str``, ``bytes`` or a binary file object, staged in the
                sandbox before the command starts; None gives an empty stdin,
                so the command never hangs waiting for input.
            timeout: seconds. The default is the lease's ``timeout``, else
                the client's (``Client(timeout=...)``, 300 s unless changed).
                On expiry the process tree is terminated and the result has
                ``timed_out=True``, ``exit_code=None`` and the output read so
                far: it does not raise unless ``check=True``.
            check: raise ``CommandFailed`` for a non-zero exit (or a
                signal), ``CommandTimeout`` for a timeout, instead of
                returning; both carry ``.result``.
            on_output: ``on_output(stream, text)`` is called live, in order,
                with decoded text (bytes with ``text=False``); ``stream`` is
                ``"stdout"`` or ``"stderr"``. It sees everything, whatever
                ``max_output`` keeps.
            echo: write the output live to ``sys.stdout`` / ``sys.stderr``
                as it arrives (in a notebook: under the cell).
            max_output: how many characters (bytes with ``text=False``) of
                ``stdout`` and of ``stderr`` the result keeps (the last ones;
                default 4 MiB each); ``result.truncated`` is True when some
                were cut.
            pty: ``True`` (80x24) or ``(rows, cols)`` runs the command on a
                terminal: its output (stdout and stderr merged, with the
                terminal's ``\r\n`` line ends) is ``stdout``; ``TERM``
                defaults to ``xterm-256color``. Nothing is typed but a Ctrl-D
                after the start, so a command reading lines sees the end of
                its input; ``stdin`` cannot be given with it (type into a
                terminal with ``start(..., pty=...)``). None or False: pipes.
            text: True (default): ``stdout`` / ``stderr`` are ``str``,
                decoded as UTF-8 incrementally (an invalid byte becomes
                U+FFFD). False (as ``subprocess``): they are the exact
                ``bytes``, never replaced.
            cancel: a ``cs.Cancel`` token. ``cancel.set()`` from another
                thread (an event loop cancelling a task) ends the command as
                its timeout would (its whole tree ended and confirmed, else
                the lease poisoned) and makes this call raise
                ``RunCancelled`` within about two round trips; a token set
                before the call raises before any request.

        Request budget: 1 in steady state (one input request to the lease's
        command session, ``stdin`` and env included); the lease's first command
        costs 3 (the session's creation and stream, then the command). A
        timeout or Ctrl-C adds 1 (ending the command's processes) and 1 to
        reattach the stream; a dropped stream adds its reconnections. Terminals
        (``pty``), stdin given as a file, a command or stdin over about 32 KiB,
        and a command while another runs in the session from another thread
        take a managed process: 3 (create, output stream, start-gate release),
        plus 1 upload when ``stdin`` is given. A cancel costs what a timeout does.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            CommandFailed, CommandTimeout: with ``check=True``.
            RunCancelled: ``cancel`` was set before the command ended.
            OutputLostError: output was evicted before it could be read.
            CreateosCleanupError: the lease is poisoned by an unconfirmed cleanup.
            LeaseClosed: the lease is not open, or ``close()`` (from another
                thread) terminated the command; at ``max_lifetime`` the run
                ends as timed out instead.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        _execution.validate_stdin(stdin)
        _check_output_options(max_output, on_output, text)
        if cancel is not None and not isinstance(cancel, Cancel):
            raise TypeError("cancel must be a createos_sync.Cancel or None")
        size, command = _terminal_options(pty, stdin, command)
        limit = check_seconds("timeout", timeout) or self._command_timeout()
        box = self._usable_box()
        output = Output(max_output, text=text, sinks=(on_output, echo_output if echo else None))
        result = None
        if size is None:
            result = _session.try_run(
                box, command, stdin=stdin, timeout=limit, output=output,
                escalate=self._destroy_now, cancel=cancel,
            )  # fmt: skip
        if result is None:
            result = _execution.run(
                box,
                command,
                stdin=stdin,
                timeout=limit,
                output=output,
                escalate=self._destroy_now,
                pty=size,
                cancel=cancel,
            )
        if cancel is not None and cancel.is_set() and result.timed_out:
            raise RunCancelled(result)
        return result.check() if check else result

    @overload
    def start(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., on_output: OnText | None = ..., echo: bool = ...,
        max_output: int = ..., pty: bool | tuple[int, int] | None = ..., text: Literal[True] = ...,
    ) -> process.Process[str]: ...  # fmt: skip
    @overload
    def start(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., on_output: OnBytes | None = ..., echo: bool = ...,
        max_output: int = ..., pty: bool | tuple[int, int] | None = ..., text: Literal[False],
    ) -> process.Process[bytes]: ...  # fmt: skip
    @overload
    def start(
        self, cmd: Cmd, *, cwd: str | None = ..., env: Env = ...,
        stdin: Stdin | None = ..., on_output: Callable[[str, Any], None] | None = ...,
        echo: bool = ..., max_output: int = ..., pty: bool | tuple[int, int] | None = ...,
        text: bool = ...,
    ) -> process.Process[Any]: ...  # fmt: skip
    def start(
        self,
        cmd: str | Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Stdin | None = None,
        on_output: Callable[[str, Any], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
        pty: bool | tuple[int, int] | None = None,
        text: bool = True,
    ) -> process.Process[Any]:
        r"""Start a command in the background and return its ``Process`` (like ``Popen``).

        Returns once the output stream is attached and the command released;
        the output is followed from a thread, so none is evicted while
        nobody reads. The process runs until it ends, ``terminate()`` or
        ``kill()``, or the lease closes (which terminates it). Request
        budget: 3 (a managed process of its own: create, output stream,
        start-gate release), where ``run()`` costs 1 in the lease's session.

        Args:
            cmd: a ``str`` runs as a bash script, a sequence as argv (as in ``run``).
            cwd: the working directory (default: the sandbox's own).
            env: variables for this command only (as in ``run``).
            stdin: ``str``, ``bytes`` or a binary file object given as the
                command's stdin; without it, stdin stays open for
                ``Process.send()`` until ``Process.close_stdin()``.
            on_output: ``on_output(stream, text)``, called live from the
                following thread, in order (``stream`` is ``"stdout"`` or
                ``"stderr"``).
            echo: write the output live to ``sys.stdout`` / ``sys.stderr``.
            max_output: characters (bytes with ``text=False``) of each
                stream that ``Process.wait()``'s result keeps (the last ones;
                ``truncated`` says if any were cut).
            pty: ``True`` (80x24) or ``(rows, cols)`` runs it on a terminal
                (see ``run``): ``Process.send()`` types into it (echoed;
                ``"\x03"`` is Ctrl-C), ``Process.resize()`` changes its size,
                and ``stdin`` cannot be given with it.
            text: False gives a ``Process[bytes]``: ``output()``,
                ``on_output`` and ``wait()``'s result carry the exact bytes.

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            LeaseClosed: the lease is not open.
        """
        command = Command.parse(cmd, cwd=cwd, env=env)
        _execution.validate_stdin(stdin)
        _check_output_options(max_output, on_output, text)
        size, command = _terminal_options(pty, stdin, command)
        return _processes.start(
            self._usable_box(),
            command,
            stdin=stdin,
            max_output=max_output,
            text=text,
            on_output=on_output,
            echo=echo_output if echo else None,
            pty=size,
        )

    @overload
    def process(
        self, process_id: str, *, on_output: OnText | None = ..., echo: bool = ...,
        max_output: int = ..., text: Literal[True] = ...,
    ) -> process.Process[str]: ...  # fmt: skip
    @overload
    def process(
        self, process_id: str, *, on_output: OnBytes | None = ..., echo: bool = ...,
        max_output: int = ..., text: Literal[False],
    ) -> process.Process[bytes]: ...  # fmt: skip
    @overload
    def process(
        self, process_id: str, *, on_output: Callable[[str, Any], None] | None = ...,
        echo: bool = ..., max_output: int = ..., text: bool = ...,
    ) -> process.Process[Any]: ...  # fmt: skip
    def process(
        self,
        process_id: str,
        *,
        on_output: Callable[[str, Any], None] | None = None,
        echo: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
        text: bool = True,
    ) -> process.Process[Any]:
        """Reattach to a process of this sandbox by id (after a kernel restart, say).

        Its output is replayed from whatever the journal still holds. If it is
        still running, it is terminated when this lease closes. An id the
        sandbox does not know raises ``CreateosApiError`` (status 404). Request
        budget: 2 (read the process, attach its output).

        Args:
            process_id: the id of a process of this sandbox (``Process.id``).
            on_output: ``on_output(stream, text)``, as in ``start``.
            echo: write the output live to ``sys.stdout`` / ``sys.stderr``.
            max_output: characters of each stream ``Process.wait()`` keeps.
            text: False replays and keeps the exact bytes (as in ``start``).
        """
        if not isinstance(process_id, str) or not process_id:
            raise ValueError("process_id must be a non-empty str")
        _check_output_options(max_output, on_output, text)
        return _processes.reattach(
            self._usable_box(),
            process_id,
            max_output=max_output,
            text=text,
            on_output=on_output,
            echo=echo_output if echo else None,
        )

    def _housekeeping_run(self, argv: list[str]) -> RunResult[str]:
        return self.run(argv, max_output=files.HOUSEKEEPING_OUTPUT)


def _terminal_options(pty: object, stdin: object, command: Command) -> tuple[Size | None, Command]:
    """The terminal size asked for, and the command as it runs there."""
    size = terminal_size(pty)
    if size is None:
        return None, command
    if stdin is not None:
        raise ValueError("a terminal process reads what is typed: stdin= cannot be given with pty")
    return size, on_terminal(command)


def _check_output_options(max_output: int, on_output: object, text: object) -> None:
    if not isinstance(max_output, int) or isinstance(max_output, bool) or max_output < 0:
        raise ValueError("max_output must be an int >= 0")
    if not isinstance(text, bool):
        raise TypeError("text must be True or False")
    if on_output is not None and not callable(on_output):
        raise TypeError("on_output must be callable")
