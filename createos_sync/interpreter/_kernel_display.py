"""Rich results in the sandbox's interpreter: mime bundles, as IPython's formatters make them,
and matplotlib's figures as PNG, as Jupyter's inline backend shows them.

Part of the kernel (see ``_kernel``): sent to the sandbox with it, standard library only.
"""

from __future__ import annotations

import base64
import importlib
import importlib.abc
import importlib.util
import io
import json
import os
import pprint
import sys
import types
from collections.abc import Callable
from typing import Any

RESULT_LIMIT = 32 * 1024 * 1024  # one formatted result, JSON, at most
MPL_BACKEND = "createos_kernel_inline"
TEXT_MIMES = {
    "text/html": "_repr_html_",
    "text/markdown": "_repr_markdown_",
    "image/svg+xml": "_repr_svg_",
    "text/latex": "_repr_latex_",
}
BINARY_MIMES = {"image/png": "_repr_png_", "image/jpeg": "_repr_jpeg_"}


class Formatter:
    """Makes an object's mime bundle; a ``_repr_*_`` method that raises or answers the wrong
    type is reported (``report``) and left out, and ``repr()`` stands in as text."""

    def __init__(self, report: Callable[[str, BaseException], None], figures: Figures) -> None:
        self.report, self.figures = report, figures

    def bundle(self, obj: Any) -> dict[str, Any]:
        """The mime bundle of ``obj``, as IPython's formatters would make it."""
        data: dict[str, Any] = {}
        if _is_figure(obj):
            data["image/png"] = self.figures.png(obj)
        method = _method(obj, "_repr_mimebundle_")
        if method is not None:
            try:
                found = method(include=None, exclude=None)
                if isinstance(found, tuple):
                    found = found[0]
                if not isinstance(found, dict):
                    raise TypeError(f"it returned {type(found).__name__}, not a dict")
                for mime, value in found.items():
                    checked = _checked(mime, value)
                    if checked is not None:
                        data.setdefault(mime, checked)
            except Exception as exc:
                self.report("_repr_mimebundle_", exc)
        for mime, name in {**TEXT_MIMES, **BINARY_MIMES, "application/json": "_repr_json_"}.items():
            method = _method(obj, name)
            if mime in data or method is None:
                continue
            try:
                value = method()
                if value is None:
                    continue
                checked = _checked(mime, value)
                if checked is None:
                    raise TypeError(f"it returned {type(value).__name__}")
                data[mime] = checked
            except Exception as exc:
                self.report(name, exc)
        if "text/plain" not in data:
            data["text/plain"] = self.text(obj)
        return data

    def text(self, obj: Any) -> str:
        try:
            if isinstance(obj, (dict, list, tuple, set, frozenset)):
                return pprint.pformat(obj, sort_dicts=False)
            return repr(obj)
        except Exception as exc:
            self.report("__repr__", exc)
            return object.__repr__(obj)


class Figures:
    """matplotlib in the kernel: its figures become PNG results, as Jupyter's inline backend
    makes them (at ``plt.show()``, and at the end of the cell for those still open)."""

    def __init__(self, display: Callable[[Any], None]) -> None:
        self.display = display

    def png(self, figure: Any) -> str:
        buffer = io.BytesIO()
        figure.savefig(buffer, format="png", bbox_inches="tight")
        return base64.b64encode(buffer.getvalue()).decode("ascii")

    def show(self, *_args: Any, **_kwargs: Any) -> None:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is None:
            return
        for number in pyplot.get_fignums():
            self.display(pyplot.figure(number))
        pyplot.close("all")

    def flush(self) -> None:
        pyplot = sys.modules.get("matplotlib.pyplot")
        if pyplot is not None and pyplot.get_backend() == f"module://{MPL_BACKEND}":
            self.show()


class ImportHooks(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """What the kernel changes in modules as they are imported: matplotlib's backend becomes
    the inline one (unless ``MPLBACKEND`` names another: an environment variable would reach
    subprocesses), served from here; IPython's ``display()``, when IPython is installed,
    becomes the kernel's (without a shell of its own it would print the object's text)."""

    def __init__(self, figures: Figures, display: Callable[..., None]) -> None:
        self.figures = figures
        self.after: dict[str, Callable[[types.ModuleType], None]] = {
            "matplotlib": _inline_backend,
            "IPython.core.display_functions": lambda module: _replace(module, display),
            "IPython.core.display": lambda module: _replace(module, display),
        }

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name == MPL_BACKEND:
            return importlib.util.spec_from_loader(name, self)
        then = self.after.get(name)
        if then is None or name in sys.modules:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader.exec_module = _then(spec.loader.exec_module, then)  # type: ignore[method-assign,assignment]
                return spec
        return None

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        agg = importlib.import_module("matplotlib.backends.backend_agg")
        module.FigureCanvas = agg.FigureCanvasAgg  # type: ignore[attr-defined]
        module.show = self.figures.show  # type: ignore[attr-defined]


def _then(
    exec_module: Callable[[types.ModuleType], None], then: Callable[[types.ModuleType], None]
) -> Callable[[types.ModuleType], None]:
    """A module's loader, then ``then`` on the module it made."""

    def load(module: types.ModuleType) -> None:
        exec_module(module)
        then(module)

    return load


def _inline_backend(matplotlib: types.ModuleType) -> None:
    if not os.environ.get("MPLBACKEND"):
        matplotlib.rcParams["backend"] = f"module://{MPL_BACKEND}"


def _replace(module: types.ModuleType, display: Callable[..., None]) -> None:
    if callable(getattr(module, "display", None)):
        module.display = display  # type: ignore[attr-defined]


def _method(obj: Any, name: str) -> Callable[..., Any] | None:
    """``obj.name`` when it is a bound method: a class's own ``_repr_*_`` is not a result's."""
    if isinstance(obj, type):
        return None
    try:
        method = getattr(obj, name, None)
    except Exception:
        return None
    return method if callable(method) else None


def _checked(mime: str, value: Any) -> Any:
    """``value`` as JSON can carry it for ``mime``, or None when it is of the wrong type."""
    if mime in BINARY_MIMES:
        if isinstance(value, (bytes, bytearray)):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, str):  # IPython's convention: already base64
            try:
                base64.b64decode(value, validate=True)
            except ValueError:
                return None
            return value
        return None
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            return None
        return value
    return value if isinstance(value, str) else None


def _is_figure(obj: Any) -> bool:
    figure = sys.modules.get("matplotlib.figure")
    return figure is not None and isinstance(obj, figure.Figure)
