"""The folder tree is the architecture (docs/explanation/architecture.md): its promises, checked."""

from __future__ import annotations

import ast
import re
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


def _imported(node: ast.AST, here: list[str], modules: set[str]) -> set[str]:
    """What one statement imports: a module, or the package a name comes from (``here``:
    the importing module's package, for relative imports)."""
    if isinstance(node, ast.ImportFrom):
        base = here[: len(here) - node.level + 1] if node.level else []
        source = ".".join(base + ([node.module] if node.module else []))
        return {
            f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
            for alias in node.names
        }
    if isinstance(node, ast.Import):
        return {alias.name for alias in node.names}
    return set()


def _runtime_imports(path: Path, modules: set[str]) -> set[str]:
    """The package's modules that ``path`` imports when it runs (``TYPE_CHECKING`` aside)."""
    name, found = _module_name(path), set()
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                visit(node.orelse)
                continue
            found.update(_imported(node, here, modules))
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
            found.update(_imported(node, here, modules))
        graph[name] = {t for t in found if t.startswith("createos_sync")}
    return graph


def test_the_integrations_import_no_private_module() -> None:
    assert _private_imports("createos_sync.integrations") == {}


def test_the_cli_is_built_on_the_public_surface() -> None:
    """What the CLI needs is public (``checks``, ``journal``, ``models``' text patterns,
    ``Client`` methods) or lives in the CLI: it is the public API's first user."""
    assert _private_imports("createos_sync.cli") == {}


def test_the_emulator_uses_the_sdk_through_public_names() -> None:
    """A layer above the client, a program of its own: ``config.is_loopback``,
    ``budget.forget`` and ``Client``, never the SDK's private rooms (its own are its own)."""
    assert _private_imports("createos_sync.emulator") == {}


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


def _is_private(module: str) -> bool:
    return any(p.startswith("_") and not p.startswith("__") for p in module.split(".")[1:])


def _public_modules() -> list[str]:
    names = [_module_name(p) for p in PACKAGE.rglob("*.py")]
    return sorted(
        n
        for n in names
        if not _is_private(n)
        and not n.startswith(("createos_sync.emulator", "createos_sync.integrations"))
        and not n.endswith("__main__")
    )


def _imported_names(path: Path) -> dict[str, tuple[str, str]]:
    """Local name -> (module, name) of every ``from X import name`` in ``path``."""
    name = _module_name(path)
    here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = {}
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = here[: len(here) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                found[alias.asname or alias.name] = (source, alias.name)
    return found


def _signature_types(path: Path, classes: set[str] | None) -> list[tuple[str, str]]:
    """(where, name) of each name in the annotations of the public functions of ``path``
    (of its public classes' public methods and ``__init__``; of ``classes`` only if given)."""
    out = []

    def annotations(where: str, function: ast.FunctionDef) -> None:
        args = function.args
        every = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        nodes = [a.annotation for a in every if a is not None and a.annotation is not None]
        if function.returns is not None:
            nodes.append(function.returns)
        for node in nodes:
            text = node.value if isinstance(node, ast.Constant) else ast.unparse(node)
            for part in ast.walk(ast.parse(str(text), mode="eval")):
                if isinstance(part, ast.Name):
                    out.append((where, part.id))

    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef) and (
            node.name in classes if classes is not None else not node.name.startswith("_")
        ):
            annotations(node.name, node)
        elif isinstance(node, ast.ClassDef) and (
            node.name in classes if classes is not None else not node.name.startswith("_")
        ):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and (
                    item.name == "__init__" or not item.name.startswith("_")
                ):
                    annotations(f"{node.name}.{item.name}", item)
    return out


def test_public_modules_take_and_give_only_public_types() -> None:
    """A type in a public signature can be named by its user: it is reachable from a public
    module. (``Lease``'s methods live in its private mixins: they are checked too.)"""
    import importlib

    import createos_sync

    publics = [importlib.import_module(m) for m in _public_modules()]
    lease_mixins = {
        (cls.__module__, cls.__name__)
        for cls in createos_sync.Lease.__mro__
        if cls.__module__.startswith("createos_sync.lease.")
    }
    sources: list[tuple[str, Path, set[str] | None]] = [
        (m, PACKAGE.parent / (m.replace(".", "/") + ".py"), None) for m in _public_modules()
    ]
    sources = [
        (m, p if p.is_file() else p.with_suffix("") / "__init__.py", c) for m, p, c in sources
    ]
    for module, name in sorted(lease_mixins):
        sources.append((module, PACKAGE.parent / (module.replace(".", "/") + ".py"), {name}))
    for public in publics:  # what a public module re-exports from a private one
        for name in getattr(public, "__all__", ()):
            origin = getattr(getattr(public, name), "__module__", "")
            if origin.startswith("createos_sync.") and _is_private(origin):
                path = PACKAGE.parent / (origin.replace(".", "/") + ".py")
                if not path.is_file():
                    path = path.with_suffix("") / "__init__.py"
                sources.append((origin, path, {name}))
    private_types = set()
    for module, path, classes in sources:
        imported = _imported_names(path)
        for where, name in _signature_types(path, classes):
            if name not in imported or not _is_private(imported[name][0]):
                continue
            source, attribute = imported[name]
            thing = getattr(importlib.import_module(source), attribute)
            if not any(getattr(p, attribute, None) is thing for p in publics):
                private_types.add(f"{module}: {where} takes {source}.{attribute}")
    assert private_types == set(), sorted(private_types)
    assert _signature_types(PACKAGE / "client.py", {"Client"})  # the scan sees signatures


def test_docstrings_name_modules_that_exist() -> None:
    """``createos_sync.x.y`` written in the package names a module or one of its names
    (the optional integrations aside)."""
    import importlib

    skip = ("createos_sync.integrations.",)
    missing = set()
    for path in PACKAGE.rglob("*.py"):
        for dotted in re.findall(r"``(createos_sync(?:\.\w+)+)``", path.read_text()):
            if dotted.startswith(skip):
                continue
            parts = dotted.split(".")
            for cut in range(len(parts), 0, -1):
                try:
                    thing: object = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attribute in parts[cut:]:
                    thing = getattr(thing, attribute, None)
                break
            if thing is None:
                missing.add(f"{_module_name(path)}: {dotted}")
    assert missing == set()


# --- the tests ------------------------------------------------------------------------------

TESTS = ROOT / "tests"


def _fixtures(source: str) -> list[str]:
    """The names of the pytest fixtures ``source`` defines (``name=`` or the function's)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call is not None else decorator
            if ast.unparse(target) not in ("pytest.fixture", "fixture"):
                continue
            named = [k.value for k in (call.keywords if call else []) if k.arg == "name"]
            found.append(
                named[0].value if named and isinstance(named[0], ast.Constant) else node.name
            )
    return found


def _fixtures_by_tier(sources: dict[Path, str]) -> dict[str, dict[str, list[str]]]:
    """tier (``unit``, ``integration``...) -> fixture name -> the files that define it.
    A fixture of the top level (``tests/conftest.py``) is defined in every tier."""
    tiers: dict[str, dict[str, list[str]]] = {}
    top: list[tuple[str, str]] = []
    for path, source in sources.items():
        parts = path.relative_to(TESTS).parts
        for name in _fixtures(source):
            if len(parts) == 1:
                top.append((name, str(path.relative_to(TESTS))))
            else:
                tiers.setdefault(parts[0], {}).setdefault(name, []).append("/".join(parts))
    for names in tiers.values():
        for name, where in top:
            names.setdefault(name, []).append(where)
    return tiers


def test_each_tier_has_one_box_and_one_official_fixture() -> None:
    """``box`` is the tier's lease, ``official`` its official client: one meaning per tier,
    so a test reads the same wherever it is (other sandboxes have names that say what)."""
    sources = {path: path.read_text() for path in TESTS.rglob("*.py")}
    tiers = _fixtures_by_tier(sources)
    twice = {
        f"{tier}: {name}": where
        for tier, names in tiers.items()
        for name, where in names.items()
        if name in ("box", "official") and len(where) > 1
    }
    assert twice == {}
    assert tiers["unit"]["box"] == ["unit/conftest.py"]  # the scan sees fixtures
    # the check can fail: a second file defining one
    doubled = {**sources, TESTS / "unit" / "test_x.py": "@pytest.fixture(name='box')\ndef b(): ..."}
    assert len(_fixtures_by_tier(doubled)["unit"]["box"]) == 2


def _public_objects() -> dict[int, list[str]]:
    """``id`` of each object a public module names (its ``__all__``, else what it defines)
    -> the public names it has, ``module.name``."""
    import importlib

    found: dict[int, list[str]] = {}
    for module_name in ["createos_sync", "createos_sync.emulator", *_public_modules()]:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            names = [
                n
                for n, v in vars(module).items()
                if not n.startswith("_") and getattr(v, "__module__", None) == module_name
            ]
        for name in names:
            found.setdefault(id(getattr(module, name)), []).append(f"{module_name}.{name}")
    return found


def _private_uses(source: str, where_from: str, public: dict[int, list[str]]) -> list[str]:
    """What ``source`` (the file ``where_from``) takes from a private module of the package
    although a public module names it: ``from _private import name``, ``_private.name``."""
    import importlib
    import types

    def named(thing: object, name: str) -> list[str]:
        where = public.get(id(thing), [])
        if isinstance(thing, (bool, int, float, str, bytes, tuple, type(None))):
            return [w for w in where if w.rsplit(".", 1)[1] == name]  # (interned values)
        return where

    out, modules = [], {}
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module):
            continue
        if not node.module.startswith("createos_sync"):
            continue
        for alias in node.names:
            if not _is_private(f"{node.module}.{alias.name}"):
                continue
            try:
                thing = getattr(importlib.import_module(node.module), alias.name)
            except (ImportError, AttributeError):  # an integration whose extra is missing
                continue
            if isinstance(thing, types.ModuleType):
                modules[alias.asname or alias.name] = thing
            elif where := named(thing, alias.name):
                out.append(f"{where_from}:{node.lineno}: {alias.name} is {where[0]}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = modules.get(node.value.id)
            thing = getattr(module, node.attr, None) if module is not None else None
            if thing is None or isinstance(thing, types.ModuleType):
                continue
            if where := named(thing, node.attr):
                text = f"{node.value.id}.{node.attr} is {where[0]}"
                out.append(f"{where_from}:{node.lineno}: {text}")
    return out


def test_tests_use_the_public_name_where_there_is_one() -> None:
    """A test that takes ``Journal`` from ``_sandboxes.journal`` tests what users do not
    hold; one that tests a private unit (``_wire``'s, say) imports it, and may."""
    public = _public_objects()
    found = [
        use
        for path in sorted(TESTS.rglob("*.py"))
        for use in _private_uses(path.read_text(), str(path.relative_to(TESTS)), public)
    ]
    assert found == []
    # the check can fail: a test taking the journal from its private room
    probe = "from createos_sync._sandboxes.journal import Journal\n"
    probe += "from createos_sync._sandboxes import reap\nreap.Reaped\n"
    assert _private_uses(probe, "probe.py", public) == [
        "probe.py:1: Journal is createos_sync.journal.Journal",
        "probe.py:3: reap.Reaped is createos_sync.journal.Reaped",
    ]
