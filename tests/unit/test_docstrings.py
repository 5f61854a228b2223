"""Every public parameter of the public API is described in its docstring (``help()`` tells)."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import createos_sync as cs

# Classes whose constructor users call. Results, records, handles and the resolved
# configuration come from the library (``cs.lease()`` builds a Lease, ``start()`` a
# Process, ``Config.resolve`` a Config); exceptions are caught, not built.
CONSTRUCTED_BY_USERS = {"Client"}


def public_callables() -> Iterator[tuple[str, Callable[..., Any], str]]:
    """(name, callable, where its parameters are described) for the whole public surface:
    the functions of ``__all__``, the public methods of its classes, and the constructors
    users call (described in the class docstring or in ``__init__``'s)."""
    for name in cs.__all__:
        item = getattr(cs, name)
        if inspect.isclass(item):
            if issubclass(item, BaseException):
                continue
            if name in CONSTRUCTED_BY_USERS:
                init = item.__init__
                yield name, init, f"{item.__doc__ or ''}\n{init.__doc__ or ''}"
            for attr, member in inspect.getmembers(item):
                if attr.startswith("_") or not callable(member):
                    continue
                if inspect.isclass(member):
                    continue
                yield f"{name}.{attr}", member, member.__doc__ or ""
        elif callable(item):
            yield name, item, item.__doc__ or ""


def undocumented(function: Callable[..., Any], doc: str) -> list[str]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # a builtin without a signature
        return []
    return [
        p.name
        for p in parameters
        if p.name not in ("self", "cls")
        and not p.name.startswith("_")
        and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        and not re.search(rf"\b{re.escape(p.name)}\b", doc)
    ]


def test_every_public_parameter_is_described_in_its_docstring() -> None:
    missing = {}
    for name, function, doc in public_callables():
        names = undocumented(function, doc)
        if names:
            missing[name] = names
    assert missing == {}


def test_the_check_can_fail() -> None:
    def sample(cmd: str, *, timeout: float) -> None:
        """Run ``cmd``."""

    assert undocumented(sample, sample.__doc__ or "") == ["timeout"]
    assert "Lease.run" in {name for name, _, _ in public_callables()}


OPTIONS = ("max_output", "truncated", "on_output(stream, text)", "echo")


@pytest.mark.parametrize(
    ("method", "phrases"),
    [
        ("run", (*OPTIONS, "Client(timeout=...)", "timed_out=True")),  # where the default is
        ("start", OPTIONS),
    ],
)
def test_run_and_start_say_what_their_options_do(method: str, phrases: tuple[str, ...]) -> None:
    doc = inspect.getdoc(getattr(cs.Lease, method)) or ""
    for phrase in phrases:
        assert phrase in doc, phrase
