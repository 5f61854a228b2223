"""``cs.map``'s progress display: a tqdm bar on a terminal, plain lines elsewhere, or nothing."""

from __future__ import annotations

import io

import pytest

from createos_sync.fanout._progress import Progress

from .streams import KernelStream, Terminal


def _run(progress: Progress) -> None:
    progress.running = 3
    progress.show()
    progress.running, progress.done, progress.failed = 1, 3, 1
    progress.show()
    progress.running = 0
    progress.close()


@pytest.mark.parametrize("total", [5, None])
def test_a_bar_on_a_terminal_by_default(total: int | None) -> None:
    out = Terminal()
    progress = Progress(None, total, stream=out)
    assert progress.refresh == 1.0  # elapsed and rate are redrawn while nothing finishes
    _run(progress)
    drawn = out.getvalue()
    assert "cs.map" in drawn and "\r" in drawn
    assert "failed=1 running=0" in drawn
    assert ("4/5" if total else "4item") in drawn


def test_a_bar_in_a_jupyter_notebook_by_default() -> None:
    out = KernelStream()  # not a terminal: told apart by the kernel's stream, as for transfers
    progress = Progress(None, 5, stream=out)
    assert progress.refresh == 1.0
    _run(progress)
    assert "cs.map" in out.getvalue() and "failed=1 running=0" in out.getvalue()


def test_never_with_progress_false() -> None:
    out = Terminal()
    progress = Progress(False, 5, stream=out)
    assert progress.refresh is None
    _run(progress)
    assert out.getvalue() == ""


def test_nothing_by_default_when_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(None, 5, stream=out)
    assert progress.refresh is None
    _run(progress)
    assert out.getvalue() == ""


def test_plain_lines_when_forced_and_not_a_terminal() -> None:
    out = io.StringIO()
    progress = Progress(True, None, stream=out)
    _run(progress)
    assert "\r" not in out.getvalue()
    (line,) = out.getvalue().splitlines()  # shows are every 10 s at most: only the last one
    assert line.startswith("cs.map: 4 finished (3 done, 1 failed), 0 running, ")
    assert line.endswith(" items/s")


def test_a_wait_for_the_request_budget_shows_while_it_lasts() -> None:
    left = [12.4]
    out, plain = Terminal(), io.StringIO()
    bar = Progress(None, 5, stream=out, waiting=lambda: left[0])
    lines = Progress(True, 5, stream=plain, waiting=lambda: left[0])
    bar.running = lines.running = 2
    bar.show()
    lines.close()
    assert "failed=0 running=2 waiting 12 s for the request budget" in out.getvalue()
    assert plain.getvalue().rstrip().endswith(", waiting 12 s for the request budget")
    left[0] = 0.0
    bar.done, bar.running = 1, 1
    bar.close()
    assert out.getvalue().rstrip().endswith("failed=0 running=1]")
