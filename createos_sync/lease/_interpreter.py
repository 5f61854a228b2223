"""The lease's code interpreter: ``run_code`` in its default context, ``code_context``.

The engine is ``createos_sync.interpreter`` (``CodeContext``); these methods
check arguments (before any request) and hand over.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from ._commands import DEFAULT_MAX_OUTPUT
from ._core import LeaseCore

if TYPE_CHECKING:  # the interpreter is imported at its first use, not with the package
    from ..interpreter import CodeContext, Execution
    from ..interpreter._context import OnCodeOutput

_default_lock = threading.Lock()


class InterpreterMethods(LeaseCore):
    """``run_code`` and ``code_context``."""

    _default_context: CodeContext | None = None

    def run_code(
        self,
        code: str,
        *,
        timeout: float | None = None,
        on_output: OnCodeOutput | None = None,
        context: CodeContext | None = None,
        check: bool = False,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> Execution:
        """Run Python ``code`` as a notebook cell in the sandbox and return its ``Execution``.

        The interpreter keeps its state between calls (the lease's default
        context, or ``context=``); the last expression's value, what
        ``display()`` shows and matplotlib's figures come back as ``results``;
        an exception is reported in ``error`` (with its traceback), not raised,
        unless ``check=True``. It needs only the sandbox's ``python3``.

        Args:
            code: Python source (a ``SyntaxError`` is reported in ``error``).
            timeout: seconds (default: the lease's ``timeout``, as for ``run``).
                At expiry the cell gets ``KeyboardInterrupt`` and the context
                survives; a cell that ignores it has its interpreter stopped.
            on_output: ``on_output(stream, data)``, called live, in order:
                ``("stdout", text)``, ``("stderr", text)``, ``("result", Result)``.
            context: a ``code_context()`` of this lease to run in.
            check: raise ``CodeFailed`` (with ``.execution``) when the cell raised.
            max_output: characters of ``stdout`` and of ``stderr`` kept (the last ones).

        Request budget: 1 per cell in steady state (the input carrying the
        cell: its output comes back on the stream already attached); the first
        cell of a context costs 3 (it rides the interpreter's start: create,
        connect, and the gate's release carrying the interpreter and the cell),
        and Ctrl-C adds 1 (the interrupt sent to the cell).

        Raises:
            ValueError, TypeError: invalid arguments, before any request.
            CodeFailed: with ``check=True``, the cell raised.
            KeyboardInterrupt: Ctrl-C here, after the cell was interrupted in the
                sandbox (the context survives; a second Ctrl-C stops it).
            LeaseClosed: the lease is not open.
        """
        from ..interpreter import CodeContext

        if context is not None and not isinstance(context, CodeContext):
            raise TypeError("context must be a CodeContext from code_context()")
        chosen = context if context is not None else self._default_code_context()
        return chosen.run_code(
            code, timeout=timeout, on_output=on_output, check=check, max_output=max_output
        )

    def code_context(
        self, *, cwd: str | None = None, env: Mapping[str, str] | None = None
    ) -> CodeContext:
        """A separate Python interpreter in this sandbox (nothing shared with the others).

        Nothing is sent until its first cell (which costs 3 requests: it starts the
        interpreter); ``close()`` stops it, and so does closing the lease.

        Args:
            cwd: its working directory (default: the sandbox's own).
            env: environment variables for it (names as for ``run``).
        """
        from ..interpreter import CodeContext

        self._usable_box()
        return CodeContext(
            self._usable_box, cwd=cwd, env=env, default_timeout=self._command_timeout
        )

    def _default_code_context(self) -> CodeContext:
        with _default_lock:
            if self._default_context is None:
                self._default_context = self.code_context()
            return self._default_context
