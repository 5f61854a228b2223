"""Output streams over HTTP: live flushing, replay, eviction (410), backpressure."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.journal import Journal
from createos_sync.emulator._service.streams import ConnectStream

from ..waiting import wait_until
from .helpers import Api, output

GATE = 'cat >/dev/null; exec "$@"'  # waits for stdin EOF, then runs the command


def gated(api: Api, sandbox_id: str, *argv: str) -> str:
    """A process that starts ``argv`` only once stdin is closed."""
    return api.process(sandbox_id, "bash", "-c", GATE, "gate", *argv)


def release(api: Api, sandbox_id: str, process_id: str) -> None:
    path = api.proc_path(sandbox_id, process_id, "/stdin/close")
    assert api.call("POST", path).status_code == 200


def test_first_frame_of_a_running_process_arrives_at_once(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    process_id = any_api.process(sandbox_id, "bash", "-c", "echo first; exec sleep 60")
    with any_api.connect(sandbox_id, process_id) as response:
        assert response.headers["Content-Type"].startswith("application/x-ndjson")
        lines = response.iter_lines()
        first = json.loads(next(lines))
        while first["type"] == "heartbeat":
            first = json.loads(next(lines))
        assert first["type"] == "data"
        assert first["seq"] == 1
        assert output([first]) == b"first\n"
        assert json.loads(next(lines)) == {"type": "heartbeat"}
    reply = any_api.data("DELETE", any_api.proc_path(sandbox_id, process_id))
    assert reply["tree_exited"] is True


def test_seq_is_contiguous_across_stdout_and_stderr(any_api: Api) -> None:
    sandbox_id = any_api.sandbox()
    script = "for i in $(seq 1 40); do echo out$i; echo err$i >&2; done"
    process_id = gated(any_api, sandbox_id, "bash", "-c", script)
    with any_api.connect(sandbox_id, process_id) as response:
        release(any_api, sandbox_id, process_id)
        frames = [json.loads(line) for line in response.iter_lines() if line]
    data = [f for f in frames if f["type"] == "data"]
    assert [f["seq"] for f in data] == list(range(1, len(data) + 1))
    assert {f["stream"] for f in data} == {"stdout", "stderr"}
    assert frames[-1] == {"type": "exit", "exit_code": 0}
    assert output(data, "stdout").split() == [f"out{i}".encode() for i in range(1, 41)]
    assert output(data, "stderr").split() == [f"err{i}".encode() for i in range(1, 41)]


def test_replay_after_n_and_eviction_without_a_reader(make_emu: Callable[..., Emulator]) -> None:
    api = Api(make_emu(journal_bytes=4096, frame_bytes=1024))
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "head", "-c", "100000", "/dev/zero")
    info = api.wait_exit(sandbox_id, process_id)
    newest = info["output"]["newest_seq"]
    assert newest >= 98
    assert info["output"]["bytes"] <= 4096
    oldest = info["output"]["oldest_seq"]
    expired = api.connect(sandbox_id, process_id, after=0)
    assert expired.status_code == 410
    assert expired.json() == {
        "status": "fail",
        "data": {"oldest_available_seq": oldest},
        "message": "output_offset_expired",
        "code": 410,
    }
    tail = api.frames(sandbox_id, process_id, after=newest - 2)
    assert [f.get("seq") for f in tail] == [newest - 1, newest, None]
    assert tail[-1] == {"type": "exit", "exit_code": 0}
    assert api.frames(sandbox_id, process_id, after=newest) == [{"type": "exit", "exit_code": 0}]


def test_backpressure_loses_nothing_through_a_small_journal(
    make_emu: Callable[..., Emulator],
) -> None:
    api = Api(make_emu(journal_bytes=64 * 1024, frame_bytes=16 * 1024))
    sandbox_id = api.sandbox()
    count = 2_700_000  # about 20 MB of output
    expected = hashlib.sha256("".join(f"{i}\n" for i in range(1, count + 1)).encode())
    process_id = gated(api, sandbox_id, "seq", "1", str(count))
    digest = hashlib.sha256()
    last_seq = 0
    with api.connect(sandbox_id, process_id) as response:
        release(api, sandbox_id, process_id)
        for line in response.iter_lines():
            frame = json.loads(line)
            if frame["type"] == "data":
                assert frame["seq"] == last_seq + 1
                last_seq = frame["seq"]
                digest.update(output([frame]))
            elif frame["type"] == "exit":
                assert frame == {"type": "exit", "exit_code": 0}
                break
    assert digest.hexdigest() == expected.hexdigest()


def test_a_background_child_holding_the_pipe_does_not_delay_exit(api: Api) -> None:
    sandbox_id = api.sandbox()
    process_id = api.process(sandbox_id, "bash", "-c", "sleep 30 & echo started")
    frames = api.frames(sandbox_id, process_id)  # returns once the exit frame came
    assert output(frames) == b"started\n"
    assert frames[-1] == {"type": "exit", "exit_code": 0}
    api.data("DELETE", api.proc_path(sandbox_id, process_id), params={"grace_ms": 0})


def test_a_client_that_goes_away_detaches(make_emu: Callable[..., Emulator]) -> None:
    api = Api(make_emu(journal_bytes=8192, frame_bytes=1024))
    sandbox_id = api.sandbox()
    process_id = gated(api, sandbox_id, "head", "-c", "1000000", "/dev/zero")
    response = api.connect(sandbox_id, process_id)
    release(api, sandbox_id, process_id)
    next(response.iter_lines())
    response.close()  # without reading on: the pump must not stay blocked (beyond the
    # short hold a dropped connection leaves for its reconnection)
    info = api.wait_exit(sandbox_id, process_id)
    assert info["exit_code"] == 0
    wait_until(lambda: api.data("GET", api.proc_path(sandbox_id, process_id))["tree_exited"])


def test_eviction_in_the_stream_says_where_the_journal_starts() -> None:
    journal = Journal(4)
    stream = ConnectStream(journal.attach(0), heartbeat=0.05)
    journal.append("stdout", b"1234")
    journal.close()  # a stopped process evicts freely, whoever lags
    journal.append("stdout", b"5678")
    lines = [line for line in stream if line]
    stream.close()
    assert [json.loads(line) for line in lines] == [
        {"type": "error", "error": "output_offset_expired", "oldest_available_seq": 2}
    ]


def test_an_aborted_journal_ends_the_stream_without_an_exit_frame() -> None:
    journal = Journal(100)
    stream = ConnectStream(journal.attach(0), heartbeat=0.05)
    journal.append("stdout", b"x")
    journal.abort()
    assert [line for line in stream if line] == []
