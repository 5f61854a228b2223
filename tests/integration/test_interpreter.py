"""The code interpreter on the emulator: one request per cell, state, results, bad cells."""

from __future__ import annotations

import _thread
import queue
import threading
import time

import pytest

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync.emulator import Emulator

from .helpers import operations


def _sandbox_has_matplotlib(box: Lease) -> bool:
    return box.run(["python3", "-c", "import matplotlib"]).exit_code == 0


def test_one_request_per_cell_and_the_state_kept(emulator: Emulator, box: Lease) -> None:
    assert box.id is not None
    emulator.clear_request_log()
    first = box.run_code("x = 20\nx + 1")
    assert first.text == "21" and first.error is None and not first.restarted
    started = [op for op, _ in operations(emulator, box.id)]  # the cell rides the start's gate
    assert started == ["process.create", "process.connect", "process.input"]
    emulator.clear_request_log()
    for n in range(5):
        execution = box.run_code(f"print('cell {n}')\nx + {n}")
        assert execution.stdout == f"cell {n}\n" and execution.text == str(20 + n)
    assert operations(emulator, box.id) == [("process.input", 200)] * 5
    box.run_code("import os\nos._exit(0)")  # the interpreter ends under its cell
    emulator.clear_request_log()
    assert box.run_code("1").restarted  # a new one, started with the cell: 3 requests again
    assert [op for op, _ in operations(emulator, box.id)] == started


def test_results_errors_and_output_live(box: Lease) -> None:
    seen: list[tuple[str, object]] = []
    code = (
        "import sys\n"
        "print('out')\n"
        "sys.stderr.write('err\\n')\n"
        "class Card:\n"
        "    def _repr_html_(self): return '<b>card</b>'\n"
        "display(Card())\n"
        "{'a': 1}"
    )
    execution = box.run_code(code, on_output=lambda stream, data: seen.append((stream, data)))
    assert execution.stdout == "out\n" and execution.stderr == "err\n"
    html, main = execution.results
    assert html.html == "<b>card</b>" and not html.is_main_result
    assert main.is_main_result and main.text == "{'a': 1}" and execution.text == "{'a': 1}"
    assert [s for s, _ in seen] == ["stdout", "stderr", "result", "result"]
    failed = box.run_code("def f():\n    raise KeyError('k')\nf()")
    assert failed.error is not None and failed.error.name == "KeyError"
    assert 'File "<cell 2>", line 2, in f' in failed.error.traceback
    with pytest.raises(cs.CodeFailed, match="the code raised KeyError: 'k'"):
        box.run_code("f()", check=True)
    syntax = box.run_code("def (")
    assert syntax.error is not None and syntax.error.name == "SyntaxError"
    assert box.run_code("Card").error is None  # the context survived both


def test_a_timeout_interrupts_the_cell_and_the_context_survives(box: Lease) -> None:
    box.run_code("kept = 'yes'")
    started = time.monotonic()
    execution = box.run_code("import time\ntime.sleep(60)", timeout=0.5)
    assert time.monotonic() - started < 10
    assert execution.timed_out and execution.error is not None
    assert execution.error.name == "KeyboardInterrupt"
    assert box.run_code("kept").text == "'yes'"


def test_a_kernel_that_dies_is_reported_and_replaced(box: Lease) -> None:
    box.run_code("kept = 1")
    died = box.run_code("import os\nprint('bye', flush=True)\nos._exit(3)")
    assert died.stdout == "bye\n"
    assert died.error is not None and died.error.name == "InterpreterDied"
    assert "exited with status 3" in died.error.value
    fresh = box.run_code("kept")
    assert fresh.restarted and fresh.error is not None and fresh.error.name == "NameError"
    assert box.run_code("1").restarted is False
    killed = box.run_code("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    assert killed.error is not None and "SIGKILL" in killed.error.value


def test_contexts_share_nothing_and_close(emulator: Emulator, box: Lease) -> None:
    box.run_code("name = 'default'")
    with box.code_context(env={"WHO": "other"}, cwd="/tmp") as other:
        assert (
            other.run_code("import os\nos.environ['WHO'], os.getcwd()").text == "('other', '/tmp')"
        )
        assert other.run_code("name").error is not None
        assert box.run_code("name", context=other).error is not None
    assert box.run_code("name").text == "'default'"
    with pytest.raises(cs.LeaseClosed, match="closed"):
        other.run_code("1")


def test_ctrl_c_interrupts_the_cell_in_the_sandbox(box: Lease) -> None:
    box.run_code("kept = 2")
    timer = threading.Timer(1.0, _thread.interrupt_main)
    timer.start()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        box.run_code("import time\nwhile True:\n    time.sleep(0.1)", timeout=60)
    timer.join()
    assert time.monotonic() - started < 8  # the cell ended there: not the timeout, not the grace
    after = box.run_code("kept")
    assert after.text == "2" and not after.restarted


class _LosesTheEnd(queue.Queue):  # type: ignore[type-arg]
    """A kernel's frames, where Ctrl-C comes just as the end frame was taken."""

    lost = False

    def get(self, block: bool = True, timeout: float | None = None) -> object:
        item = super().get(block, timeout)
        if getattr(item, "kind", None) == "end" and not self.lost:
            self.lost = True
            raise KeyboardInterrupt
        return item


def test_ctrl_c_as_the_cell_ends_neither_waits_nor_loses_the_context(box: Lease) -> None:
    context = box.code_context()
    context.run_code("kept = 4")
    assert context._kernel is not None
    context._kernel.frames = _LosesTheEnd()
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        context.run_code("1")
    assert time.monotonic() - started < 3  # the end came again: not the 5 s grace
    after = context.run_code("kept")
    assert after.text == "4" and not after.restarted
    context.close()


def test_a_cell_printing_a_lot_keeps_the_last_part_and_streams_all(box: Lease) -> None:
    total = 0

    def count(stream: str, data: object) -> None:
        nonlocal total
        if stream == "stdout":
            assert isinstance(data, str)
            total += len(data)

    code = (
        "import sys\nchunk = 'x' * 1023 + '\\n'\n"
        "for _ in range(100 * 1024):\n    sys.stdout.write(chunk)"
    )
    execution = box.run_code(code, on_output=count, max_output=1000)
    assert execution.error is None
    assert total == 100 * 1024 * 1024  # 100 MiB streamed, nothing lost
    assert execution.truncated and len(execution.stdout) == 1000


def test_a_sandbox_without_python3_says_so(box: Lease) -> None:
    context = box.code_context(env={"PATH": "/nowhere"})
    execution = context.run_code("1")
    assert execution.error is not None and execution.error.name == "InterpreterDied"
    assert "exited with status 127" in execution.error.value
    assert "python3: not found" in execution.error.value
    context.close()


def test_closing_the_lease_ends_its_interpreters_without_a_leftover(
    emulator: Emulator, client: Client
) -> None:
    with client.lease() as lease:
        lease.run_code("1")
        lease.code_context().run_code("2")
        sandbox_id = lease.id
    assert lease.closed and sandbox_id not in emulator.live_sandboxes()


def test_a_figure_made_in_the_sandbox_is_a_png(box: Lease) -> None:
    if not _sandbox_has_matplotlib(box):
        pytest.skip("the sandbox's python3 has no matplotlib (.ci/run installs it)")
    execution = box.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('made in the sandbox');"
    )
    assert execution.error is None, execution.error
    [figure] = execution.results
    assert figure.png is not None and figure.png.startswith(b"\x89PNG")
    assert figure._repr_mimebundle_()["image/png"]  # base64 text, as Jupyter takes it


def test_a_cell_that_ignores_its_timeout_has_its_interpreter_replaced(box: Lease) -> None:
    box.run_code("kept = 3")
    stubborn = (
        "import time\n"
        "while True:\n"
        "    try:\n"
        "        time.sleep(10)\n"
        "    except KeyboardInterrupt:\n"
        "        print('ignored', flush=True)\n"
    )
    started = time.monotonic()
    execution = box.run_code(stubborn, timeout=0.3)
    assert time.monotonic() - started < 8
    assert execution.timed_out and execution.error is not None
    assert execution.error.name == "TimeoutError" and "did not stop" in execution.error.value
    assert execution.stdout == "ignored\n"
    after = box.run_code("'kept' in globals()")
    assert after.restarted and after.text == "False"


def test_closing_the_lease_under_a_running_cell(client: Client) -> None:
    lease = client.lease().open()
    lease.run_code("1")
    closer = threading.Timer(0.5, lease.close)
    closer.start()
    with pytest.raises(cs.LeaseClosed):
        lease.run_code("import time\ntime.sleep(60)", timeout=60)
    closer.join()
    assert lease.closed


def test_a_callback_that_raises_leaves_no_cell_running(box: Lease) -> None:
    def fail(stream: str, data: object) -> None:
        raise RuntimeError("callback broke")

    # 45 s, not 60: a stall of the output stream (its idle timeout is 60 s) stays apart
    code = "import time\nprint('first', flush=True)\ntime.sleep(45)"
    with pytest.raises(RuntimeError, match="callback broke"):
        box.run_code(code, on_output=fail)
    started = time.monotonic()
    assert box.run_code("'next'").text == "'next'"  # the sleeping cell was interrupted
    assert time.monotonic() - started < 10


def test_bad_arguments_are_refused_before_any_request(emulator: Emulator, box: Lease) -> None:
    emulator.clear_request_log()
    with pytest.raises(ValueError, match="invalid environment variable name"):
        box.code_context(env={"1bad": "x"})
    with pytest.raises(TypeError, match="code must be a str"):
        box.run_code(b"1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout must be a positive"):
        box.run_code("1", timeout=-1)
    with pytest.raises(TypeError, match="context must be a CodeContext"):
        box.run_code("1", context="other")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="on_output must be callable"):
        box.run_code("1", on_output="print")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_output must be an int"):
        box.run_code("1", max_output=-1)
    assert operations(emulator, box.id) == []


_CHANNEL = "import gc, os\nwire = next(o for o in gc.get_objects() if type(o).__name__ == 'Wire')\n"


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("b'garbage\\n'", "not one of its frames"),
        ("f'{wire.token} end W10=\\n'.encode()", "not a JSON object"),  # "[]"
        ("f'{wire.token} res e30=\\n'.encode()", "without its formats"),  # "{}"
    ],
)
def test_a_cell_writing_over_the_kernels_channel_ends_its_kernel(
    box: Lease, written: str, said: str
) -> None:
    box.run_code("kept = 1")
    with pytest.raises(cs.ProtocolError, match=said):
        box.run_code(_CHANNEL + f"os.write(wire.out, {written})\nimport time\ntime.sleep(30)")
    after = box.run_code("'kept' in globals()")
    assert after.restarted and after.text == "False"


def test_closing_a_context_under_its_running_cell_does_not_wait_for_it(box: Lease) -> None:
    context = box.code_context()
    context.run_code("1")
    closer = threading.Timer(0.5, context.close)
    closer.start()
    started = time.monotonic()
    with pytest.raises(cs.LeaseClosed, match="code context was closed while the cell ran"):
        context.run_code("import time\ntime.sleep(60)", timeout=60)
    closer.join()
    assert time.monotonic() - started < 10
    assert box.run_code("'default lives'").text == "'default lives'"
