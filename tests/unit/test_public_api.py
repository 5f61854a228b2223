"""The public surface: __all__ complete and sorted, errors shaped as the contract says."""

from __future__ import annotations

import pytest

import createos_sync as cs


def test_all_is_sorted_and_complete() -> None:
    assert cs.__all__ == sorted(cs.__all__)
    # Not identifiers: pytest rewrites the asserts of every module of a distribution that
    # has a pytest11 entry point (ours: the plugin) and adds "@py_builtins" and the like.
    public = {n for n in dir(cs) if n.isidentifier() and not n.startswith("_")}
    public -= {"annotations"}
    modules = {"cli", "client", "config", "emulator", "errors", "files", "lease", "models"}
    modules |= {"checks", "fanout", "journal", "process", "pytest_plugin", "result", "standalone"}
    modules |= {"budget", "cancel", "computer", "integrations", "interpreter"}
    assert public - modules - {"Mapping", "Sequence", "OnExit", "TYPE_CHECKING"} <= set(cs.__all__)
    for name in cs.__all__:
        assert hasattr(cs, name)
    # dir() shows __all__, dunders and submodules only: not the helpers imported for the
    # module's own use (Mapping, Sequence, TYPE_CHECKING, annotations, OnExit).
    dunder = {n for n in dir(cs) if n.startswith("__") and n.endswith("__")}
    assert set(dir(cs)) - set(cs.__all__) - dunder <= modules


def test_contract_names_exist() -> None:
    for name in [
        "lease",
        "leases",
        "close_all",
        "is_cleanup_error",
        "Client",
        "Lease",
        "RunResult",
        "Shape",
        "SandboxInfo",
        "CreateosError",
        "ConfigError",
        "CreateosApiError",
        "ProtocolError",
        "OutputLostError",
        "CreateosCleanupError",
        "CommandFailed",
        "CommandTimeout",
    ]:
        assert name in cs.__all__


def test_error_tree() -> None:
    assert issubclass(cs.ConfigError, cs.CreateosError) and issubclass(cs.ConfigError, ValueError)
    assert issubclass(cs.OutputLostError, cs.ProtocolError)
    assert issubclass(cs.RemoteFileNotFoundError, cs.CreateosApiError)
    assert issubclass(cs.RemoteFileNotFoundError, FileNotFoundError)
    assert issubclass(cs.CommandTimeout, cs.CommandFailed) and issubclass(
        cs.CommandTimeout, TimeoutError
    )
    for leaf in (cs.CreateosApiError, cs.ProtocolError, cs.CreateosCleanupError, cs.CommandFailed):
        assert issubclass(leaf, cs.CreateosError)


def test_is_cleanup_error_follows_cause_context_and_notes() -> None:
    from createos_sync.errors import attach_cleanup_failure

    cleanup = cs.CreateosCleanupError("x", sandbox_id="sb")
    assert cs.is_cleanup_error(cleanup)
    assert not cs.is_cleanup_error(ValueError("plain"))
    caused = RuntimeError("outer")
    caused.__cause__ = cleanup
    assert cs.is_cleanup_error(caused)
    context = RuntimeError("outer")
    context.__context__ = ValueError("middle")
    context.__context__.__context__ = cleanup
    assert cs.is_cleanup_error(context)
    noted = ZeroDivisionError()
    attach_cleanup_failure(noted, cleanup)
    assert cs.is_cleanup_error(noted)
    looped = ValueError("loop")
    looped.__context__ = looped
    assert not cs.is_cleanup_error(looped)


def _errors() -> list[cs.CreateosError]:
    from createos_sync.errors import add_note, attach_cleanup_failure

    failed = cs.RunResult(args="false", exit_code=1, stdout="", stderr="", process_id="p-1")
    api = cs.CreateosApiError("sandbox creation", 503, request_id="r-9", outcome_unknown=True)
    add_note(api, "a note")  # BaseException.add_note is 3.11's
    carrier = cs.CommandFailed(failed)
    attach_cleanup_failure(carrier, cs.CreateosCleanupError("x", sandbox_id="sb-2"))
    return [
        api,
        cs.OperationTimeout("process creation", 5.0, "slow"),
        cs.SandboxUnavailable("sb-1", "failed"),
        cs.CreateosCleanupError("left", sandbox_id="sb-1", process_ids=["p-1"]),
        carrier,
        cs.CommandTimeout(failed, 3.0),
        cs.ConfigError("bad"),
        cs.LeaseClosed("closed"),
    ]


def test_errors_pickle_whole() -> None:
    """Errors raised in another process (cs.map on an executor) come back with their fields."""
    import pickle

    for error in _errors():
        copy = pickle.loads(pickle.dumps(error))
        assert type(copy) is type(error)
        assert str(copy) == str(error)
        assert copy.__dict__.keys() == error.__dict__.keys()
        assert getattr(copy, "__notes__", None) == getattr(error, "__notes__", None)
        assert cs.is_cleanup_error(copy) == cs.is_cleanup_error(error)
    api = pickle.loads(pickle.dumps(_errors()[0]))
    assert isinstance(api, cs.CreateosApiError)
    assert (api.status, api.request_id, api.outcome_unknown) == (503, "r-9", True)


def test_lease_closed_is_also_a_runtime_error() -> None:
    """docs/reference/errors.md: ``LeaseClosed (also RuntimeError)``."""
    assert issubclass(cs.LeaseClosed, RuntimeError) and issubclass(cs.LeaseClosed, cs.CreateosError)


def test_a_process_and_a_desktop_come_from_a_lease() -> None:
    """Their constructors would take the lease's private sandbox handle: they have none."""
    with pytest.raises(TypeError, match=r"Lease\.start\(\) starts a process, Lease\.process"):
        cs.Process("sb-1", "p-1")
    with pytest.raises(TypeError, match=r"Lease\.computer is the desktop"):
        cs.computer.Computer()


def test_the_heavy_optional_parts_are_imported_at_first_use_only() -> None:
    """``import createos_sync`` and a lease's commands do not pay for the interpreter, the
    desktop or ``map`` (memory: BENCHMARKS.md, section 4); their names still resolve."""
    import subprocess
    import sys

    probe = (
        "import sys, createos_sync as cs\n"
        "lazy = ('createos_sync.interpreter', 'createos_sync.computer', 'createos_sync.fanout',"
        " 'difflib')\n"
        "print(sorted(m for m in lazy if m in sys.modules))\n"
        "print(cs.CodeContext.__name__, cs.Window.__name__, cs.map.__name__)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["[]", "CodeContext Window map"]


def test_run_code_keeps_the_interpreter_default_max_output() -> None:
    import inspect

    from createos_sync.interpreter._context import DEFAULT_MAX_OUTPUT

    default = inspect.signature(cs.Lease.run_code).parameters["max_output"].default
    assert default == DEFAULT_MAX_OUTPUT
