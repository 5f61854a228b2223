"""Connection reuse, end to end: in steady state no operation opens a new connection.

Counted on the emulator's side (``Emulator.connections_accepted``), over plain
HTTP and over HTTPS, where each new connection would cost a TLS handshake.
The output stream is the one that needs care: after the exit frame the
follower reads the body's end (bounded) so that its connection is pooled.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from createos_sync import Client
from createos_sync._wire.http import DRAIN_SECONDS
from createos_sync.emulator import Emulator, Fault

from .helpers import FAST, own_emulator


@pytest.fixture(scope="module", params=["http", "https"])
def server(request: pytest.FixtureRequest) -> Iterator[Emulator]:
    with own_emulator(tls=request.param == "https", transition_delay=0.0) as emu:
        yield emu


@pytest.fixture
def warm(server: Emulator) -> Iterator[Client]:
    """A client whose pool holds the two connections a run uses (stream, gate release)."""
    with server.client(requests_per_minute=FAST) as client:
        yield client


def test_runs_open_no_connection_in_steady_state(server: Emulator, warm: Client) -> None:
    with warm.lease() as box:
        box.run("true")
        before = server.connections_accepted
        for _ in range(5):
            assert box.run("echo hi").stdout == "hi\n"
        assert server.connections_accepted == before


def test_every_operation_reuses_connections(server: Emulator, warm: Client, tmp_path: Path) -> None:
    blob = bytes(range(256)) * 4096  # 1 MiB
    (tmp_path / "up.bin").write_bytes(blob)
    operations = {
        "write_file": lambda box: box.write_file("/workspace/blob", blob),
        "read_file": lambda box: box.read_file("/workspace/blob"),
        "upload": lambda box: box.upload(tmp_path / "up.bin", "/workspace/up.bin"),
        "download": lambda box: box.download("/workspace/blob", tmp_path / "down.bin"),
        "run with stdin": lambda box: box.run("cat >/dev/null", stdin=b"x" * 1000),
        "run with 3 MB of output": lambda box: box.run("head -c 3000000 /dev/zero"),
        "start + wait": lambda box: box.start("true").wait(),
        "lease open + close": lambda box: warm.lease().open().close(),
    }
    with warm.lease() as box:
        box.run("true")
        for name, operation in operations.items():
            operation(box)  # the first time may grow the pool
            before = server.connections_accepted
            operation(box)
            assert server.connections_accepted == before, name


def test_a_stream_kept_open_after_exit_costs_the_bound_not_the_hold(
    server: Emulator, warm: Client, managed_path: None
) -> None:
    with warm.lease() as box:
        box.run("true")
        server.faults.add(Fault("process.connect", hold_open=30.0))
        started = time.monotonic()
        result = box.run("echo hi")
        elapsed = time.monotonic() - started
        assert result.stdout == "hi\n" and result.exit_code == 0
        # Generous against load: the point is that the 30 s hold is not waited out.
        assert elapsed < DRAIN_SECONDS + 5.0
        # Its connection was given up, not pooled with unread data: one new connection,
        # then steady again.
        before = server.connections_accepted
        box.run("true")
        assert server.connections_accepted == before + 1
        box.run("true")
        assert server.connections_accepted == before + 1
