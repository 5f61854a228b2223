"""What a cell gives back: ``Execution`` (its output, results and error) and ``Result`` (one
rich value, shown in a notebook as the sandbox's object would show itself)."""

from __future__ import annotations

import base64
import binascii
import re
from typing import Any

import attrs

from .._wire.server_text import MESSAGE_LIMIT, log_line
from ..errors import CreateosError

# Result's fields and the mime types the kernel's bundles name them by.
_TEXT_FIELDS = {
    "text/plain": "text",
    "text/html": "html",
    "text/markdown": "markdown",
    "image/svg+xml": "svg",
    "text/latex": "latex",
}
_IMAGE_FIELDS = {"image/png": "png", "image/jpeg": "jpeg"}
_ERROR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}\Z")


@attrs.frozen(repr=False)
class Result:
    """One rich value: the last expression's, something ``display()`` showed, or a figure.

    Each format is None when the object did not offer it; ``png`` and ``jpeg``
    are bytes; ``json`` is the decoded value; ``data`` is the whole mime
    bundle (formats without a field of their own included: ``_repr_mimebundle_``
    answers with it, so Jupyter shows the object as the sandbox made it).
    """

    text: str | None = None
    html: str | None = None
    markdown: str | None = None
    svg: str | None = None
    png: bytes | None = None
    jpeg: bytes | None = None
    json: Any = None
    latex: str | None = None
    is_main_result: bool = False
    data: dict[str, Any] = attrs.field(factory=dict, eq=False)

    @classmethod
    def from_bundle(cls, bundle: dict[str, Any], *, main: bool) -> Result:
        """A result from the kernel's bundle (``main``: the last expression's value);
        values of the wrong type are left out."""
        fields: dict[str, Any] = {}
        for mime, name in _TEXT_FIELDS.items():
            if isinstance(bundle.get(mime), str):
                fields[name] = bundle[mime]
        for mime, name in _IMAGE_FIELDS.items():
            value = bundle.get(mime)
            if isinstance(value, str):
                try:
                    fields[name] = base64.b64decode(value, validate=True)
                except binascii.Error:
                    continue
        if "application/json" in bundle:
            fields["json"] = bundle["application/json"]
        data = {mime: value for mime, value in bundle.items() if isinstance(mime, str)}
        return cls(**fields, is_main_result=main, data=data)

    def formats(self) -> list[str]:
        """The formats present, by field name (``["text", "png"]``)."""
        names = [*_TEXT_FIELDS.values(), *_IMAGE_FIELDS.values(), "json"]
        return [name for name in names if getattr(self, name) is not None]

    def _repr_mimebundle_(self, include: object = None, exclude: object = None) -> dict[str, Any]:
        """The bundle as Jupyter takes it (images as base64 text)."""
        return dict(self.data)

    def __repr__(self) -> str:
        return f"<Result {' '.join(self.formats()) or 'empty'}>"


@attrs.frozen
class ExecutionError:
    """An exception the cell raised: its type's name, its text and its traceback."""

    name: str
    value: str
    traceback: str


@attrs.frozen(repr=False)
class Execution:
    """What one cell did: its results, output and error.

    ``results`` holds what ``display()`` showed, the figures, and the last
    expression's value (``is_main_result``), in order. ``stdout`` and
    ``stderr`` keep at most ``max_output`` characters each (the last ones;
    ``truncated`` says if any were cut; ``on_output`` saw everything).
    ``error`` is the exception the cell raised, reported and not raised
    (``check()`` raises it); a ``timeout`` makes it ``KeyboardInterrupt`` with
    ``timed_out``. ``restarted`` says that the interpreter was new for this
    cell because the previous one ended: what earlier cells defined is gone.
    """

    results: list[Result]
    stdout: str
    stderr: str
    error: ExecutionError | None
    duration: float
    timed_out: bool = False
    restarted: bool = False
    truncated: bool = False
    execution_count: int | None = None

    @property
    def text(self) -> str | None:
        """The last expression's value as text, or None when the cell ended in a statement."""
        for result in self.results:
            if result.is_main_result:
                return result.text
        return None

    @property
    def ok(self) -> bool:
        """True when the cell raised nothing."""
        return self.error is None

    def check(self) -> Execution:
        """Return self if the cell raised nothing; else raise ``CodeFailed`` carrying self."""
        if self.error is not None:
            raise CodeFailed(self)
        return self

    def __repr__(self) -> str:
        outcome = "ok" if self.error is None else f"error={self.error.name}"
        return (
            f"<Execution {outcome} results={len(self.results)} stdout={len(self.stdout)} "
            f"chars stderr={len(self.stderr)} chars duration={self.duration:.3f}s>"
        )


class CodeFailed(CreateosError):
    """A cell raised an exception (``check=True``, or in ``%%createos``); ``.execution`` has it.

    IPython shows it as it shows its own errors: the traceback from the
    sandbox, not this client's (``_render_traceback_``).
    """

    def __init__(self, execution: Execution) -> None:
        self.execution = execution
        error = execution.error
        what = "an error"
        if error is not None:  # the sandbox's text: shown without a terminal's escapes
            name = error.name if _ERROR_NAME.match(error.name) else "an exception"
            what = f"{name}: {log_line(error.value, MESSAGE_LIMIT)}"
        super().__init__(f"the code raised {what}")

    def _render_traceback_(self) -> list[str]:
        error = self.execution.error
        text = error.traceback if error is not None else str(self)
        return text.rstrip("\n").split("\n")
