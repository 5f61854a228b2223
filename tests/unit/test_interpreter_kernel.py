"""The kernel that runs in the sandbox, driven here over its stdin and stdout as a local
process (no sandbox: it needs only a ``python3``), frame by frame."""

from __future__ import annotations

import base64
import json
import os
import queue
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from createos_sync.interpreter import _frames

# The sandbox's python3 in the emulator is the system one; any python3 runs the kernel.
PYTHON = shutil.which("python3", path="/usr/bin") or sys.executable


class LocalKernel:
    def __init__(self, python: str = PYTHON) -> None:
        self.process = subprocess.Popen(
            [python, "-c", _frames.BOOTSTRAP],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.reader = _frames.FrameReader()
        self.booted = False
        self.lines: queue.Queue[bytes] = queue.Queue()
        self.reading: threading.Thread | None = None  # started at the first read: until then
        # the kernel's stdout fills up as nobody reads it

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line)
        self.lines.put(b"")

    def send(self, data: bytes) -> None:
        assert self.process.stdin is not None
        if not self.booted:
            data, self.booted = _frames.boot_payload() + data, True
        self.process.stdin.write(data)
        self.process.stdin.flush()

    def cell(self, code: str, timeout: float = 30.0, wait: float = 60.0) -> Cell:
        token = _frames.new_token()
        self.send(_frames.request("run", token, code=code, timeout=timeout))
        return self.until_end(token, wait)

    def until_end(self, token: str, wait: float = 60.0) -> Cell:
        if self.reading is None:
            self.reading = threading.Thread(target=self._read, daemon=True)
            self.reading.start()
        cell = Cell()
        ends = time.monotonic() + wait
        while True:
            try:
                line = self.lines.get(timeout=max(0.0, ends - time.monotonic()))
            except queue.Empty:
                raise TimeoutError(f"the cell did not end within {wait} s") from None
            if not line:
                cell.died = True
                return cell
            cell.longest_line = max(cell.longest_line, len(line))
            for frame in self.reader.feed(line.decode()):
                if frame.token != token:
                    cell.foreign += 1
                elif frame.kind == "end":
                    cell.end = json.loads(frame.payload)
                    return cell
                else:
                    cell.frames.append((frame.kind, frame.payload))

    def close(self) -> None:
        self.process.kill()
        self.process.wait()


class Cell:
    def __init__(self) -> None:
        self.frames: list[tuple[str, bytes]] = []
        self.end: dict[str, Any] = {}
        self.died = False
        self.foreign = 0
        self.longest_line = 0

    def stream(self, kind: str) -> str:
        return b"".join(p for k, p in self.frames if k == kind).decode()

    @property
    def results(self) -> list[dict[str, Any]]:
        return [json.loads(p) for k, p in self.frames if k == "res"]

    @property
    def error(self) -> dict[str, Any] | None:
        return self.end.get("error")

    @property
    def order(self) -> list[str]:
        return [
            k if k != "res" else "res:" + json.loads(p)["data"]["text/plain"]
            for k, p in self.frames
        ]


@pytest.fixture
def kernel() -> Iterator[LocalKernel]:
    k = LocalKernel()
    yield k
    k.close()


def test_state_stays_and_the_last_expression_is_the_result(kernel: LocalKernel) -> None:
    assert kernel.cell("x = 20").results == []
    cell = kernel.cell("x += 1\nx * 2")
    assert cell.results == [{"data": {"text/plain": "42"}, "main": True}]
    assert kernel.cell("_ + 1; ").results == []  # a trailing ";" shows nothing, as in IPython
    assert kernel.cell("_").results[0]["data"]["text/plain"] == "42"
    assert kernel.cell("{'b': 1, 'a': 2}").results[0]["data"]["text/plain"] == "{'b': 1, 'a': 2}"


def test_output_results_and_subprocess_output_come_in_order(kernel: LocalKernel) -> None:
    code = (
        "import os, sys\n"
        "print('one')\n"
        "os.system('echo two')\n"
        "display(3)\n"
        "sys.stderr.write('four\\n')\n"
        "os.write(2, b'five\\n')\n"
        "6"
    )
    cell = kernel.cell(code)
    assert cell.error is None
    assert cell.stream("out") == "one\ntwo\n"
    assert cell.stream("err") == "four\nfive\n"
    order = [k for k in cell.order if k != "err"]
    assert order == ["out", "out", "res:3", "res:6"]
    assert [r["main"] for r in cell.results] == [False, True]


def test_a_syntax_error_is_reported_and_the_context_kept(kernel: LocalKernel) -> None:
    kernel.cell("kept = 'yes'")
    cell = kernel.cell("def broken(:\n    pass")
    assert cell.error is not None and cell.error["name"] == "SyntaxError"
    assert "def broken(:" in cell.error["traceback"]
    assert kernel.cell("kept").results[0]["data"]["text/plain"] == "'yes'"


def test_an_exception_has_the_cells_traceback_without_the_kernels(kernel: LocalKernel) -> None:
    cell = kernel.cell("def f():\n    return 1 / 0\nf()")
    assert cell.error is not None
    assert (cell.error["name"], cell.error["value"]) == ("ZeroDivisionError", "division by zero")
    trace = cell.error["traceback"]
    assert 'File "<cell 1>", line 3' in trace and "return 1 / 0" in trace
    assert "createos" not in trace and "exec(" not in trace
    custom = kernel.cell("import json\njson.loads('{')").error
    assert custom is not None and custom["name"] == "json.decoder.JSONDecodeError"


def test_stdin_is_at_its_end_for_the_cell_and_what_it_starts(kernel: LocalKernel) -> None:
    cell = kernel.cell("input()")
    assert cell.error is not None and cell.error["name"] == "EOFError"
    cell = kernel.cell("import subprocess\nsubprocess.run(['cat'], timeout=10).returncode")
    assert cell.results[0]["data"]["text/plain"] == "0"


def test_reprs_that_raise_or_answer_the_wrong_type_are_reported(kernel: LocalKernel) -> None:
    code = (
        "class Odd:\n"
        "    def _repr_html_(self): raise ValueError('no html')\n"
        "    def _repr_png_(self): return 'not base64!'\n"
        "    def _repr_markdown_(self): return 42\n"
        "    def _repr_svg_(self): return '<svg/>'\n"
        "    def __repr__(self): raise RuntimeError('no repr')\n"
        "Odd()"
    )
    cell = kernel.cell(code)
    assert cell.error is None
    [result] = cell.results
    assert set(result["data"]) == {"image/svg+xml", "text/plain"}
    assert result["data"]["text/plain"].startswith("<__main__.Odd object at")
    stderr = cell.stream("err")
    for said in ("_repr_html_ failed: ValueError: no html", "_repr_markdown_ failed", "no repr"):
        assert said in stderr


def test_rich_results_and_mimebundles(kernel: LocalKernel) -> None:
    code = (
        "class Rich:\n"
        "    def _repr_mimebundle_(self, include=None, exclude=None):\n"
        "        return {'text/html': '<b>hi</b>', 'application/json': {'a': [1]}}\n"
        "    def _repr_png_(self): return b'\\x89PNG fake'\n"
        "Rich()"
    )
    [result] = kernel.cell(code).results
    data = result["data"]
    assert data["text/html"] == "<b>hi</b>" and data["application/json"] == {"a": [1]}
    assert base64.b64decode(data["image/png"]) == b"\x89PNG fake"


def test_a_fork_and_threads_leave_the_kernel_serving(kernel: LocalKernel) -> None:
    code = (
        "import os, threading\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    print('child')\n"
        "else:\n"
        "    os.waitpid(pid, 0)\n"
        "    t = threading.Thread(target=lambda: print('thread'))\n"
        "    t.start(); t.join()\n"
        "    print('parent')\n"
    )
    cell = kernel.cell(code)
    assert cell.error is None
    assert sorted(cell.stream("out").split()) == ["child", "parent", "thread"]
    assert kernel.cell("'still here'").results[0]["data"]["text/plain"] == "'still here'"


def test_a_timeout_interrupts_the_cell_and_keeps_the_context(kernel: LocalKernel) -> None:
    kernel.cell("kept = 1")
    cell = kernel.cell("import time\nprint('before')\ntime.sleep(30)", timeout=0.3)
    assert cell.end["timed_out"] is True
    assert cell.error is not None and cell.error["name"] == "KeyboardInterrupt"
    assert cell.stream("out") == "before\n"
    assert kernel.cell("kept + 1").results[0]["data"]["text/plain"] == "2"


def test_an_interrupt_request_reaches_only_its_own_cell(kernel: LocalKernel) -> None:
    token = _frames.new_token()
    kernel.send(_frames.request("run", token, code="import time\ntime.sleep(30)", timeout=60))
    kernel.send(_frames.request("interrupt", "some-other-cell"))
    kernel.send(_frames.request("interrupt", token))
    cell = kernel.until_end(token)
    assert cell.error is not None and cell.error["name"] == "KeyboardInterrupt"
    assert kernel.cell("1 + 1").error is None  # no interrupt left over for the next cell


def test_an_interrupt_whose_signal_went_unseen_is_delivered_again(kernel: LocalKernel) -> None:
    # SIGINT landing after Python's last check for signals and before a blocking call (under
    # load: the interrupted cell then slept its full 60 s) is taken without effect. Here the
    # cell takes the timeout's SIGINT itself, without effect, then blocks.
    code = (
        "import signal, time\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})\n"
        "time.sleep(1.0)\n"  # the timeout's SIGINT comes meanwhile, and waits
        "signal.sigtimedwait({signal.SIGINT}, 0)\n"  # taken: unseen
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})\n"
        "time.sleep(20)\n"
    )
    started = time.monotonic()
    cell = kernel.cell(code, timeout=0.2)
    assert cell.error is not None and cell.error["name"] == "KeyboardInterrupt"
    assert cell.end["timed_out"] is True
    assert time.monotonic() - started < 10
    assert kernel.cell("1 + 1").error is None


def test_a_cells_own_sigint_handler_gets_one_signal_per_interrupt(kernel: LocalKernel) -> None:
    code = (
        "import signal, time\n"
        "seen = []\n"
        "signal.signal(signal.SIGINT, lambda *_: seen.append(1))\n"
        "time.sleep(1.5)\n"
        "len(seen)"
    )
    cell = kernel.cell(code, timeout=0.2)
    assert cell.error is None and cell.results[0]["data"]["text/plain"] == "1"


def test_an_interrupt_never_cuts_a_frame_line(kernel: LocalKernel) -> None:
    # Nobody reads the kernel's stdout: it blocks in the middle of a frame line (64 KiB, a
    # pipe's size), and the interrupt's SIGINT lands there. The line must end whole first.
    token = _frames.new_token()
    code = "import sys, time\nsys.stdout.write('x' * 200_000)\ntime.sleep(20)"
    kernel.send(_frames.request("run", token, code=code, timeout=60))
    time.sleep(1.0)  # the kernel fills the pipe and blocks
    kernel.send(_frames.request("interrupt", token))
    time.sleep(0.5)  # the signal lands
    cell = kernel.until_end(token)  # a cut line: ProtocolError here
    assert cell.error is not None and cell.error["name"] == "KeyboardInterrupt"
    assert cell.stream("out") == "x" * 200_000
    assert kernel.cell("1 + 1").error is None


def test_an_interrupt_for_the_cell_that_ended_last_sends_its_end_again(kernel: LocalKernel) -> None:
    # The client, interrupted (Ctrl-C) just as it took the end frame, asks again.
    token = _frames.new_token()
    kernel.send(_frames.request("run", token, code="6 * 7", timeout=30))
    first = kernel.until_end(token)
    kernel.send(_frames.request("interrupt", token))
    again = kernel.until_end(token, wait=10)
    assert again.end == first.end and again.end["count"] == 1
    assert kernel.cell("1").foreign == 0  # nothing more


# Compiled as the kernel's own code (so that the kernel takes it for its own): at the AT-th
# line the kernel runs during the next cell, another thread interrupts that cell, as a request
# would. Left armed (AT = 0), it counts those lines.
_INTERRUPT_AT = """
import gc, sys, threading
kernel = next(o for o in gc.get_objects() if type(o).__name__ == "Kernel")
def tracer(frame, event, arg, seen=[0]):
    if frame.f_code.co_filename != kernel.run.__code__.co_filename:
        return None
    if event == "line" and kernel.running is not None:
        seen[0] += 1
        if seen[0] == AT:
            sys.settrace(None)
            threading.Thread(target=kernel.interrupt, args=(kernel.running,)).start()
    return tracer
sys.settrace(tracer)
"""
_ARM = (
    "import gc\n"
    "_kernel = next(o for o in gc.get_objects() if type(o).__name__ == 'Kernel')\n"
    "_at = {'AT': %d}\n"
    "exec(compile(%r, _kernel.run.__code__.co_filename, 'exec'), _at)\n"
)
_WRITES = "import sys\nsys.stdout.write('x' * 100_000)"  # 3 frame lines, then a result


def test_an_interrupt_at_any_line_of_the_kernels_own_code_leaves_it_whole(
    kernel: LocalKernel,
) -> None:
    kernel.cell(_ARM % (0, _INTERRUPT_AT))
    assert kernel.cell(_WRITES).error is None
    lines = kernel.cell("import sys\nsys.settrace(None)\n_at['tracer'].__defaults__[0][0]")
    count = int(lines.results[0]["data"]["text/plain"])
    assert count > 100  # the cell's start, its writes, its result, its end
    for at in range(1, count + 1):
        kernel.cell(_ARM % (at, _INTERRUPT_AT))
        cell = kernel.cell(_WRITES, wait=10)  # never a cut frame line, never a stall
        assert not cell.died, at
        assert cell.error is None or cell.error["name"] == "KeyboardInterrupt", (at, cell.error)
        assert cell.stream("out") in ("", "x" * 100_000), at
        assert kernel.cell("1 + 1").results[0]["data"]["text/plain"] == "2", at


def test_printing_a_frame_line_cannot_end_the_cell(kernel: LocalKernel) -> None:
    fake_end = base64.b64encode(json.dumps({"error": None}).encode()).decode()
    code = (
        "import os\n"
        f"print('- end {fake_end}')\n"
        f"os.write(1, b'x end {fake_end}\\n')\n"
        "print('after')\n"
    )
    cell = kernel.cell(code)
    # (sys.stdout and fd 1 are two channels: their relative order is best effort)
    lines = sorted(cell.stream("out").splitlines())
    assert lines == [f"- end {fake_end}", "after", f"x end {fake_end}"]
    assert cell.foreign == 0


def test_large_output_streams_in_lines_far_under_the_services_limit(kernel: LocalKernel) -> None:
    cell = kernel.cell("import sys\nfor _ in range(80):\n    sys.stdout.write('y' * 65536)\n")
    assert len(cell.stream("out")) == 80 * 65536
    assert cell.longest_line < 70 * 1024
    big = kernel.cell("'z' * (3 * 1024 * 1024)")  # one result over several frames
    assert len(big.results[0]["data"]["text/plain"]) == 3 * 1024 * 1024 + 2
    assert big.longest_line < 70 * 1024


def test_output_of_a_thread_between_cells_comes_with_the_next_cell(kernel: LocalKernel) -> None:
    code = (
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('late'))).start()"
    )
    assert kernel.cell(code).stream("out") == ""
    time.sleep(0.8)  # the thread prints while no cell runs
    assert kernel.cell("print('next')").stream("out") == "late\nnext\n"


def test_os_exit_ends_the_kernel(kernel: LocalKernel) -> None:
    cell = kernel.cell("import os\nos._exit(3)")
    assert cell.died
    assert kernel.process.wait(5) == 3


def test_a_figure_is_a_png_result(kernel: LocalKernel) -> None:
    probe = subprocess.run([PYTHON, "-c", "import matplotlib"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"{PYTHON} has no matplotlib")
    code = (
        "import matplotlib.pyplot as plt\n"
        "for n in (1, 2):\n"
        "    plt.plot([0, n])\n"
        "    plt.show()\n"
        "plt.plot([1, 2, 3])\n"
        "plt.title('left open')"
    )
    cell = kernel.cell(code)
    assert cell.error is None, cell.error
    figures = [r for r in cell.results if "image/png" in r["data"]]
    assert len(figures) == 3  # two at show(), one left open at the end of the cell
    for figure in figures:
        assert base64.b64decode(figure["data"]["image/png"]).startswith(b"\x89PNG")
        assert figure["data"]["text/plain"].startswith("<Figure size")
    assert "Agg" not in cell.stream("err")  # no "non-interactive backend" warning
    # the inline backend is the kernel's alone: nothing the cell starts is told of it
    environ = kernel.cell("import os\nos.environ.get('MPLBACKEND')").results
    assert environ == []


OLDER_AND_NEWER = sorted(
    str(p)
    for p in Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")).glob(
        "versions/3.*/bin/python3"
    )
    if p.parent.parent.name.split(".")[1].isdigit() and int(p.parent.parent.name.split(".")[1]) >= 8
)


@pytest.mark.parametrize("python", OLDER_AND_NEWER or [PYTHON])
def test_the_kernel_runs_on_every_python3_from_3_8(python: str) -> None:
    kernel = LocalKernel(python)
    try:
        cell = kernel.cell("x = {'b': 1, 'a': 2}\ndisplay(x)\nlen(x)")
        assert cell.error is None, cell.error
        assert [r["data"]["text/plain"] for r in cell.results] == ["{'b': 1, 'a': 2}", "2"]
        assert kernel.cell("import time\ntime.sleep(5)", timeout=0.2).error["name"] == (
            "KeyboardInterrupt"
        )
    finally:
        kernel.close()


def test_ipythons_display_in_the_sandbox_is_the_kernels() -> None:
    probe = subprocess.run([sys.executable, "-c", "import IPython.display"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("no IPython beside this interpreter")
    kernel = LocalKernel(sys.executable)
    try:
        code = (
            "from IPython.display import HTML, Markdown, display\n"
            "display(HTML('<b>bold</b>'), Markdown('*md*'))"
        )
        cell = kernel.cell(code)
        assert cell.error is None, cell.error
        assert [sorted(r["data"]) for r in cell.results] == [
            ["text/html", "text/plain"],
            ["text/markdown", "text/plain"],
        ]
        assert cell.stream("out") == ""  # not printed as text, as IPython does without a shell
    finally:
        kernel.close()
