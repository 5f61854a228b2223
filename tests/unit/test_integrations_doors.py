"""The integrations' room and doors: adapters import only the SDK's public surface."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOM = Path(__file__).resolve().parents[2] / "createos_sync" / "integrations"
# The public surface, and the room's own shared modules.
DOORS = {"createos_sync", "createos_sync.errors", "_threads", "_files"}


def _sdk_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("createos_sync")}
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # from . import _threads / from ._files import ...
                found |= {node.module} if node.module else {a.name for a in node.names}
            elif node.module and node.module.startswith("createos_sync"):
                found.add(node.module)
    return found


def test_adapters_import_only_the_public_surface() -> None:
    through_walls = {
        f"{path.name}: {name}" for path in ROOM.glob("*.py") for name in _sdk_imports(path) - DOORS
    }
    assert through_walls == set()


def test_the_check_sees_an_underscore_module(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("from createos_sync._sandboxes import journal\nfrom . import _threads\n")
    assert _sdk_imports(sneaky) == {"createos_sync._sandboxes", "_threads"}


@pytest.mark.parametrize(
    ("module", "framework", "extra"),
    [
        ("createos_sync.emulator", "werkzeug", "emulator"),
        ("createos_sync.integrations.inspect", "inspect_ai", "inspect"),
        ("createos_sync.integrations.openai_agents", "agents", "openai-agents"),
        ("createos_sync.integrations.harbor", "harbor", "harbor"),
    ],
)
def test_a_missing_extra_is_one_line_naming_what_to_install(
    module: str, framework: str, extra: str
) -> None:
    # In a fresh interpreter, with the framework missing as in a bare environment.
    script = (
        f"import sys; sys.modules[{framework!r}] = None\n"
        f"try:\n    import {module}\n"
        "except ModuleNotFoundError as exc:\n"
        "    print(exc.name); print(exc); print(exc.__cause__, exc.__suppress_context__)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    name, *said = done.stdout.splitlines()
    assert name.split(".")[0] == framework, done.stderr  # the module that is missing
    assert said == [
        f"{module} needs {framework}, which is not installed: pip install 'createos-sync[{extra}]'",
        "None True",  # no chain of internal frames behind it
    ], done.stderr
