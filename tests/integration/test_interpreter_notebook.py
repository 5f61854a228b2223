"""examples/code_interpreter.ipynb, executed by a real Jupyter kernel against the emulator:
``%%createos`` shows a figure drawn in the sandbox as an inline PNG."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from createos_sync.emulator import Emulator

NOTEBOOK = Path(__file__).resolve().parents[2] / "examples" / "code_interpreter.ipynb"


def test_the_notebook_is_stored_without_outputs() -> None:
    notebook = json.loads(NOTEBOOK.read_text())
    assert (notebook["nbformat"], notebook["nbformat_minor"]) == (4, 5)
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    assert all(cell["outputs"] == [] and cell["execution_count"] is None for cell in code)
    assert any("".join(cell["source"]).startswith("%%createos box") for cell in code)


def test_the_notebook_shows_a_png_made_in_the_sandbox(
    emulator: Emulator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    pytest.importorskip("ipykernel")
    with emulator.client() as client, client.lease() as probe:
        if probe.run(["python3", "-c", "import matplotlib"]).exit_code != 0:
            pytest.skip("the sandbox's python3 has no matplotlib (.ci/run installs it)")
    monkeypatch.setenv("CREATEOS_API_URL", emulator.url)
    monkeypatch.setenv("CREATEOS_API_KEY", emulator.api_key)
    monkeypatch.setenv("JUPYTER_PLATFORM_DIRS", "1")
    monkeypatch.setenv("HOME", str(tmp_path))
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(
        notebook, timeout=120, startup_timeout=120, kernel_name="python3"
    ).execute()
    outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    pngs = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG")
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "area:\n 12.566370614359172" in text and "ZeroDivisionError" in text
