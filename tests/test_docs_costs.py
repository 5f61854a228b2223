"""The request-cost table of the docs (docs/reference/request-costs.md) is what the code sends.

Each row's operation runs on the emulator, and its requests are counted from the
emulator's request log: exactly the row's figure, status polls (``sandbox.get`` while
waiting for a state) left out where the row says "+ status polls". A row without a
measurement here, or a measurement without a row, fails: the table and this file move
together.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import createos_sync as cs
from createos_sync.emulator import Emulator

PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "request-costs.md"
POLL = "sandbox.get"


def table() -> dict[str, tuple[int, bool]]:
    """operation -> (requests, whether status polls come on top), from the page's table."""
    rows = {}
    for line in PAGE.read_text().splitlines():
        match = re.fullmatch(r"\| `?(.+?)`?(, [a-z ]+)? \| (\d+)( \+ status polls)? \|.*\|", line)
        if match:
            rows[match.group(1) + (match.group(2) or "")] = (
                int(match.group(3)),
                bool(match.group(4)),
            )
    return rows


@pytest.fixture(scope="module")
def emulator() -> Iterator[Emulator]:
    with Emulator(rate_limit=None) as emu:
        yield emu


@pytest.fixture(scope="module")
def client(emulator: Emulator) -> Iterator[cs.Client]:
    with emulator.client(requests_per_minute=1_000_000, rate_scope="process") as c:
        yield c


Step = Callable[[cs.Client, cs.Lease, Path], Callable[[], object]]


def _reopened_process(box: cs.Lease) -> Callable[[], object]:
    process = box.start("sleep 100")
    return lambda: box.process(process.id)


def _listening(box: cs.Lease) -> Callable[[], object]:
    box.start(["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1"])
    return lambda: box.wait_for_port(8123)


def _local_dir(tmp: Path) -> Path:
    (tmp / "tree").mkdir(exist_ok=True)
    (tmp / "tree" / "f.txt").write_text("x")
    return tmp / "tree"


def _remote_dir(box: cs.Lease) -> Callable[[], object]:
    box.run("mkdir -p /workspace/d && echo x > /workspace/d/f", check=True)
    return lambda: None


def _in_steady_state(box: cs.Lease, command: Callable[[], object]) -> Callable[[], object]:
    box.run("true", check=True)  # the lease's first command started its command session
    return command


def _cancelled(box: cs.Lease) -> None:
    """A run cancelled from another thread once its command printed."""
    cancel, started = cs.Cancel(), threading.Event()
    canceller = threading.Thread(target=lambda: (started.wait(30), cancel.set()))
    canceller.start()
    try:
        with pytest.raises(cs.RunCancelled):
            box.run("echo started; sleep 30", cancel=cancel, on_output=lambda *_: started.set())
    finally:
        started.set()
        canceller.join()


def _timed_out(result: cs.RunResult[str]) -> None:
    assert result.timed_out and result.stdout == "started\n", result


def _second_cell(box: cs.Lease) -> Callable[[], object]:
    box.run_code("x = 1")  # the first cell started the interpreter
    return lambda: box.run_code("x + 1")


def _started_context(box: cs.Lease) -> Callable[[], object]:
    context = box.code_context()
    context.run_code("1")
    return context.close


def _network(client: cs.Client, box: cs.Lease) -> Callable[[], object]:
    network = client.create_network("costs")
    return lambda: box.attach_network(network)


# operation (as the table's first cell) -> set-up that returns the measured action
MEASURED: dict[str, Step] = {
    "cs.lease().open()": lambda c, b, t: c.lease().open,
    "cs.lease(ttl=None).open()": lambda c, b, t: c.lease(ttl=None).open,
    "box.close()": lambda c, b, t: c.lease(ttl=None).open().close,
    "box.fork()": lambda c, b, t: b.fork,
    "box.pause()": lambda c, b, t: c.lease().open().pause,
    "box.resume()": lambda c, b, t: (lambda lease: (lease.pause(), lease.resume)[1])(
        c.lease().open()
    ),
    "box.info()": lambda c, b, t: b.info,
    "box.run(cmd), first of a lease": lambda c, b, t: lambda: b.run("true"),
    "box.run(cmd), in steady state": lambda c, b, t: _in_steady_state(b, lambda: b.run("true")),
    "box.run(cmd, stdin=data), first of a lease": lambda c, b, t: (
        lambda: b.run("cat", stdin="x", check=True)
    ),
    "box.run(cmd, stdin=data), in steady state": lambda c, b, t: _in_steady_state(
        b, lambda: b.run("cat", stdin="x", check=True)
    ),
    "box.run(cmd, timeout=s), timed out": lambda c, b, t: _in_steady_state(
        b, lambda: _timed_out(b.run("echo started; sleep 30", timeout=1))
    ),
    "box.run(cmd, cancel=token), cancelled": lambda c, b, t: _in_steady_state(
        b, lambda: _cancelled(b)
    ),
    "box.run(cmd, pty=True)": lambda c, b, t: _in_steady_state(
        b, lambda: b.run("true", pty=True, check=True)
    ),
    "box.start(cmd)": lambda c, b, t: lambda: b.start("true").wait(),
    "process.send(data)": lambda c, b, t: (lambda p: lambda: p.send("x"))(b.start("cat")),
    "process.close_stdin()": lambda c, b, t: b.start("cat").close_stdin,
    "process.resize(rows, cols)": lambda c, b, t: (lambda p: lambda: p.resize(30, 100))(
        b.start("sleep 100", pty=True)
    ),
    "process.terminate()": lambda c, b, t: b.start("sleep 100").terminate,
    "box.process(process_id)": lambda c, b, t: _reopened_process(b),
    "box.wait_for_port(port)": lambda c, b, t: _listening(b),
    "box.run_code(code)": lambda c, b, t: _second_cell(b),
    "box.code_context().run_code(code)": lambda c, b, t: lambda: b.code_context().run_code("1"),
    "context.close()": lambda c, b, t: _started_context(b),
    "box.preview_url(port)": lambda c, b, t: (b.set_ingress(True), lambda: b.preview_url(80))[1],
    "box.write_file(path, data)": lambda c, b, t: lambda: b.write_file("/workspace/f", b"x"),
    "box.read_file(path)": lambda c, b, t: (
        b.write_file("/workspace/g", b"x"),
        lambda: b.read_file("/workspace/g"),
    )[1],
    "box.upload_dir(local, remote)": lambda c, b, t: _in_steady_state(
        b, lambda: b.upload_dir(_local_dir(t), "/workspace/up")
    ),
    "box.download_dir(remote, local)": lambda c, b, t: (
        _remote_dir(b),
        lambda: b.download_dir("/workspace/d", t / "down"),
    )[1],
    "box.egress()": lambda c, b, t: b.egress,
    "box.set_egress(rules)": lambda c, b, t: lambda: b.set_egress(["pypi.org"]),
    "box.set_ingress(enabled)": lambda c, b, t: lambda: b.set_ingress(True),
    "box.set_auto_pause(seconds)": lambda c, b, t: lambda: b.set_auto_pause(600),
    "box.create_access_token()": lambda c, b, t: b.create_access_token,
    "box.attach_network(network)": lambda c, b, t: _network(c, b),
    "box.bandwidth()": lambda c, b, t: b.bandwidth,
    "client.shapes()": lambda c, b, t: c.shapes,
    "client.sandboxes()": lambda c, b, t: c.sandboxes,
    "client.create_network(name)": lambda c, b, t: lambda: c.create_network("made"),
    "client.delete_network(network)": lambda c, b, t: (lambda n: lambda: c.delete_network(n))(
        c.create_network("unused")
    ),
    "client.request(method, path)": lambda c, b, t: lambda: c.request("GET", "/sandboxes"),
    "client.build_template(name, dockerfile)": lambda c, b, t: (
        lambda: c.build_template("costs", "FROM ubuntu:24.04\nRUN true\n")
    ),
    "cs.map(fn, items), per item": lambda c, b, t: (
        lambda: cs.map(lambda box, item: None, [1], client=c, progress=False)
    ),
}


def test_every_row_is_measured_and_every_measurement_has_a_row() -> None:
    assert sorted(table()) == sorted(MEASURED)


@pytest.mark.parametrize("operation", sorted(MEASURED))
def test_the_operation_sends_what_the_table_says(
    operation: str, emulator: Emulator, client: cs.Client, tmp_path: Path
) -> None:
    expected, polls = table()[operation]
    try:
        with client.lease(ttl=None) as box:
            action = MEASURED[operation](client, box, tmp_path)
            emulator.clear_request_log()
            action()
            sent = [r.operation for r in emulator.request_log]
    finally:
        cs.close_all()
        for network in client.networks():
            client.delete_network(network)
        for template in client.templates():
            client.delete_template(template.id)
    counted = [op for op in sent if not (polls and op == POLL)]
    assert len(counted) == expected, sent


def test_the_table_parser_sees_polls_and_per_item_rows() -> None:
    rows = table()
    assert rows["box.run(cmd), first of a lease"] == (3, False)
    assert rows["box.run(cmd), in steady state"] == (1, False)
    assert rows["box.fork()"][1] is True
    assert "cs.map(fn, items), per item" in rows
