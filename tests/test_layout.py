"""The folder tree is the architecture (README, "Architecture"): its promises, checked."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "createos_sync"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports when it runs (``TYPE_CHECKING`` aside)."""
    name, found = _module_name(path), set()
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    whole = f"{source}.{alias.name}"
                    found.add(whole if whole in modules else source)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            for child in ("body", "orelse", "finalbody", "handlers"):
                if isinstance(getattr(node, child, None), list):
                    visit(getattr(node, child))

    visit(ast.parse(path.read_text()).body)
    return found & modules


def _graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _runtime_imports(path, set(files)) for name, path in files.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph``, or None."""
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_top_level_holds_the_public_surface_and_the_rooms() -> None:
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(modules) <= 16, modules
    for room in ("_wire", "_sandboxes", "_commands", "lease", "cli", "emulator"):
        assert (PACKAGE / room / "__init__.py").is_file(), room


def test_every_sub_package_says_what_lives_there() -> None:
    missing = [
        str(init.relative_to(PACKAGE))
        for init in PACKAGE.rglob("__init__.py")
        if not ast.get_docstring(ast.parse(init.read_text()))
    ]
    assert missing == []


def test_no_module_imports_itself_back_at_run_time() -> None:
    assert _cycle(_graph()) is None


def test_the_checks_can_fail() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_the_import_contracts_of_pyproject_hold() -> None:
    """``lint-imports``: the layers of README "Architecture" (type-hint imports included),
    and the integrations on the public surface. Its report names each breach."""
    lint_imports = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if lint_imports is None:
        pytest.fail("lint-imports is missing: pip install -e '.[test]' (import-linter)")
    done = subprocess.run(
        [lint_imports, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def _private_imports(package: str) -> dict[str, set[str]]:
    """What the modules of ``package`` import from private modules outside it, by module
    (a private module: any part of its dotted name after the root starts with ``_``)."""
    found: dict[str, set[str]] = {}
    for name, targets in _all_imports().items():
        if name != package and not name.startswith(f"{package}."):
            continue
        for target in targets:
            if target.startswith(f"{package}.") or target == package:
                continue
            parts = target.split(".")[1:]
            if any(p.startswith("_") and not p.startswith("__") for p in parts):
                found.setdefault(name, set()).add(target)
    return found


def _all_imports() -> dict[str, set[str]]:
    """Every import of the package's modules, ``TYPE_CHECKING`` ones included."""
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                source = ".".join(base + ([node.module] if node.module else []))
                for alias in node.names:
                    whole = f"{source}.{alias.name}"
                    found.add(whole if whole in modules else source)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
        graph[name] = {t for t in found if t.startswith("createos_sync")}
    return graph


def test_the_integrations_import_no_private_module() -> None:
    assert _private_imports("createos_sync.integrations") == {}


def test_the_cli_is_built_on_the_public_surface() -> None:
    """What the CLI needs is public (``checks``, ``journal``, ``models``' text patterns,
    ``Client`` methods) or lives in the CLI: it is the public API's first user."""
    assert _private_imports("createos_sync.cli") == {}


def test_the_private_import_check_can_fail() -> None:
    fanout = _private_imports("createos_sync.fanout")
    assert "createos_sync.lease._options" in fanout["createos_sync.fanout._pool"]
    assert not any(t.startswith("createos_sync.fanout.") for ts in fanout.values() for t in ts)


def _classes_by_name(paths: list[Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found.setdefault(node.name, []).append(_module_name(path))
    return found


def test_no_two_classes_of_the_sdk_share_a_name() -> None:
    """One name, one thing: a reader who finds ``Recovery`` in a traceback knows which.
    (The emulator is a program of its own: its records mirror the SDK's models.)"""
    paths = [p for p in PACKAGE.rglob("*.py") if "emulator" not in p.parts]
    twice = {name: where for name, where in _classes_by_name(paths).items() if len(where) > 1}
    assert twice == {}
    # the check can fail: a module read twice has each of its classes twice
    assert _classes_by_name([PACKAGE / "client.py"] * 2)["Client"] == ["createos_sync.client"] * 2


def _writers(attribute: str, package: Path) -> set[str]:
    """The functions of ``package`` that assign ``self.<attribute>``."""
    found = set()
    for path in package.rglob("*.py"):
        for function in ast.walk(ast.parse(path.read_text())):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                targets = (
                    node.targets
                    if isinstance(node, ast.Assign)
                    else [node.target]
                    if isinstance(node, (ast.AnnAssign, ast.AugAssign))
                    else []
                )
                if any(ast.unparse(t) == f"self.{attribute}" for t in targets):
                    found.add(f"{_module_name(path)}.{function.name}")
    return found


def test_a_leases_sandbox_record_has_one_writer() -> None:
    """Ten mixins share a lease's state: the last sandbox record seen is written in one
    place, which every mixin hands its records to."""
    assert _writers("_info", PACKAGE / "lease") == {
        "createos_sync.lease._core.__init__",  # None until the lease opens
        "createos_sync.lease._closing._saw",
    }
    assert "createos_sync.lease._core.__init__" in _writers("_box", PACKAGE / "lease")
