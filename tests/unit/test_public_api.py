"""The public surface: __all__ complete and sorted, errors shaped as the contract says."""

from __future__ import annotations

import createos_sync as cs


def test_all_is_sorted_and_complete() -> None:
    assert cs.__all__ == sorted(cs.__all__)
    public = {n for n in dir(cs) if not n.startswith("_")} - {"annotations"}
    modules = {"cli", "client", "config", "emulator", "errors", "files", "lease", "models"}
    modules |= {"process", "result", "templates"}  # submodules, present once imported
    assert public - modules - {"Mapping", "Sequence", "OnExit", "TYPE_CHECKING"} <= set(
        cs.__all__
    )
    for name in cs.__all__:
        assert hasattr(cs, name)


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
