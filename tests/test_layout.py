"""The folder tree is the architecture (docs/explanation/architecture.md): its promises, checked."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "createos_sync"


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


def test_the_wire_imports_nothing_above_it_but_configuration_and_errors() -> None:
    allowed = {"createos_sync.config", "createos_sync.errors", "createos_sync.result"}
    above = {
        f"{name} -> {target}"
        for name, targets in _graph().items()
        if name.startswith("createos_sync._wire")
        for target in targets
        if not target.startswith("createos_sync._wire") and target not in allowed
    }
    assert above == set()


def test_the_checks_can_fail() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
