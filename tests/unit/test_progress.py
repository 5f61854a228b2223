"""``progress=True``: a tqdm bar on a terminal or in a notebook, plain lines elsewhere."""

from __future__ import annotations

import io
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import tqdm
import tqdm.std

from createos_sync._files import Meter, _progress, metered
from createos_sync.fanout._progress import Progress

from .streams import KernelStream, Terminal
from .wire import SANDBOX, Service


def test_the_display_is_chosen_by_where_stderr_goes() -> None:
    assert isinstance(_progress.display("x", Terminal()), _progress.Bar)
    assert isinstance(_progress.display("x", KernelStream()), _progress.Bar)
    assert isinstance(_progress.display("x", io.StringIO()), _progress.Lines)


def test_a_terminal_gets_a_tqdm_bar_that_restarts_with_a_retry() -> None:
    screen = Terminal()
    bar = _progress.display("upload data.bin", screen)
    bar(0, 2048)
    bar(1024, 2048)
    bar(0, 2048)  # a retry starts the transfer again
    bar(2048, 2048)
    bar.close()
    frames = [f for f in screen.getvalue().split("\r") if f.strip()]
    assert frames[0].startswith("upload data.bin:   0%|")
    assert frames[-1].startswith("upload data.bin: 100%|") and "2.00k/2.00k" in frames[-1]
    assert screen.getvalue().endswith("\n")


class ZMQInteractiveShell:
    """What ``get_ipython()`` returns in a Jupyter kernel (as tqdm looks at it)."""

    config: ClassVar[dict[str, Any]] = {"IPKernelApp": {}}


@pytest.fixture
def kernel(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """A Jupyter kernel as tqdm detects one; tqdm's notebook modules import afresh in it."""
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = ZMQInteractiveShell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "ipykernel.zmqshell", types.ModuleType("ipykernel.zmqshell"))
    for name in TQDM_NOTEBOOK_MODULES:
        monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.delattr(tqdm, name.split(".")[1], raising=False)
    yield monkeypatch
    for name in TQDM_NOTEBOOK_MODULES:  # imported in the fake kernel: not for other tests
        sys.modules.pop(name, None)


TQDM_NOTEBOOK_MODULES = ("tqdm.auto", "tqdm.autonotebook", "tqdm.notebook")


def test_a_kernel_without_ipywidgets_gets_a_text_bar_and_no_warning(
    kernel: pytest.MonkeyPatch,
) -> None:
    kernel.setitem(sys.modules, "ipywidgets", None)  # not installed: its import fails
    transfer, fanout = KernelStream(), KernelStream()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        bar = _progress.display("upload data.bin", transfer)
        bar(0, 2048)
        bar(2048, 2048)
        bar.close()
        progress = Progress(True, 2, stream=fanout)
        progress.done = 2
        progress.close()
    assert [str(w.message) for w in warned] == []  # tqdm.auto warns "IProgress not found"
    assert transfer.getvalue().split("\r")[-1].startswith("upload data.bin: 100%|")
    assert fanout.getvalue().split("\r")[-1].startswith("cs.map: 100%|")


def test_a_kernel_with_ipywidgets_gets_tqdm_s_widget(kernel: pytest.MonkeyPatch) -> None:
    widgets = types.ModuleType("ipywidgets")
    widgets.FloatProgress = widgets.HTML = widgets.HBox = object  # type: ignore[attr-defined]
    kernel.setitem(sys.modules, "ipywidgets", widgets)
    assert _progress.tqdm_class(KernelStream()) is sys.modules["tqdm.notebook"].tqdm
    assert _progress.tqdm_class(Terminal()) is tqdm.std.tqdm


def test_elsewhere_a_line_per_quarter_and_no_carriage_return() -> None:
    log = io.StringIO()
    lines = _progress.display("download /workspace/big", log)
    for done in (0, 100, 300, 600, 800, 1000):
        lines(done, 1000)
    lines.close()
    assert log.getvalue() == "".join(
        f"download /workspace/big: {p}% of 1000 bytes\n" for p in (25, 50, 75, 100)
    )
    unknown = io.StringIO()
    lines = _progress.display("write /workspace/s", unknown)
    lines(0, None)
    lines(3 * 1024 * 1024, None)
    lines.close()
    assert unknown.getvalue() == "write /workspace/s: 3.0 MB\n"
    failed = io.StringIO()
    lines = _progress.display("upload x", failed)
    lines(0, 1000)
    lines(600, 1000)
    lines.close()  # a transfer that stopped midway never claims 100%
    assert failed.getvalue() == "upload x: 50% of 1000 bytes\n"


def test_metered_closes_the_display_and_passes_callbacks_through(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    with metered(True, "write /workspace/a") as meter:
        meter.start(10)
        meter.advance(10)
        meter.finish()
    assert log.getvalue() == "write /workspace/a: 100% of 10 bytes\n"
    with pytest.raises(OSError), metered(True, "write /workspace/b") as meter:
        meter.start(None)
        meter.advance(5)
        raise OSError("the transfer failed")
    assert log.getvalue().count("\n") == 1  # a failed transfer claims no total
    seen: list[tuple[int, int | None]] = []
    with metered(lambda d, t: seen.append((d, t)), "ignored") as meter:
        meter.start(None)
    assert seen == [(0, None)]
    for off in (None, False):
        with metered(off, "ignored") as meter:
            assert isinstance(meter, Meter)
            meter.start(5)
    assert log.getvalue().count("\n") == 1


def test_write_file_with_progress_true_reports_on_stderr(
    box: Any, service: Service, capsys: pytest.CaptureFixture[str]
) -> None:
    service.add("PUT", f"/sandboxes/{SANDBOX}/files", body={})
    box.write_file("/workspace/a", b"x" * 4096, progress=True)
    assert capsys.readouterr().err == "write /workspace/a: 100% of 4096 bytes\n"
    with pytest.raises(TypeError, match="True"):
        box.write_file("/workspace/a", b"x", progress="yes")
