"""The command session's framing: request fields and the records among output bytes."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync._commands import framing

TOKEN = "0123456789abcdef0123456789abcdef"
OTHER = "fedcba9876543210fedcba9876543210"


def scan(chunks: list[bytes], tokens: tuple[str, ...] = (TOKEN,)) -> list[object]:
    """What a scanner makes of ``chunks``: output bytes (joined) and records, in order."""
    events: list[object] = []

    def emit(data: bytes) -> None:
        if events and isinstance(events[-1], bytes):
            events[-1] += data
        else:
            events.append(data)

    scanner = framing.RecordScanner(lambda: tokens, emit, events.append)
    for chunk in chunks:
        scanner.feed(chunk)
    scanner.flush()
    return events


def record(token: str, tail: str = "") -> bytes:
    return framing.PREFIX + token.encode() + (b" " + tail.encode() if tail else b"") + b"\n"


def test_output_before_a_record_in_the_same_chunk_comes_first() -> None:
    assert scan([b"ran\n" + record(TOKEN, "x 0")]) == [
        b"ran\n",
        framing.SupervisorRecord(TOKEN, "x 0"),
    ]


@given(st.binary(max_size=200), st.binary(max_size=200), st.integers(1, 7))
def test_any_bytes_split_anywhere_keep_their_order(before: bytes, after: bytes, step: int) -> None:
    stream = before + record(TOKEN, "s 9") + after
    chunks = [stream[i : i + step] for i in range(0, len(stream), step)]

    events = scan(chunks)

    rebuilt = [e for e in events if isinstance(e, bytes)]
    records = [e for e in events if isinstance(e, framing.SupervisorRecord)]
    assert records == [framing.SupervisorRecord(TOKEN, "s 9")]  # random bytes cannot hold the token
    assert b"".join(rebuilt) == before + after
    assert events.index(records[0]) == (1 if before else 0)


def test_a_record_with_an_unknown_token_is_output() -> None:
    forged = record(OTHER, "x 0")

    assert scan([b"a" + forged + b"b"]) == [b"a" + forged + b"b"]


def test_a_lone_nul_and_a_prefix_cut_at_the_end_are_output() -> None:
    assert scan([b"\x00x\x00\x1e" + TOKEN[:5].encode()]) == [b"\x00x\x00\x1e" + TOKEN[:5].encode()]


def test_a_record_without_its_newline_is_held_until_it_comes() -> None:
    head = record(TOKEN, "k 0")[:-1]
    events: list[object] = []
    scanner = framing.RecordScanner(lambda: (TOKEN,), events.append, events.append)

    scanner.feed(b"out" + head)
    assert events == [b"out"]
    scanner.feed(b"\nrest")
    assert events == [b"out", framing.SupervisorRecord(TOKEN, "k 0"), b"rest"]


def test_fields_never_hold_a_space_or_a_newline() -> None:
    line = framing.run_request(TOKEN, 3, "/tmp/a b", b"x\ny z\x00", "echo 'a b'\nexit 1")

    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert line.split(b" ")[:3] == [b"R", TOKEN.encode(), b"3"]
    assert len(line.split(b" ")) == 6
    assert framing.field(None) == "-"
    assert framing.kill_request(TOKEN, 3, 1.0) == f"K {TOKEN} 3 20\n".encode()


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@given(st.binary(max_size=300))
def test_bash_printf_turns_a_field_back_into_its_bytes(data: bytes) -> None:
    field = framing.field(data)

    decoded = subprocess.run(
        ["bash", "-c", 'printf "%b" "${1#:}"', "bash", field], capture_output=True, check=True
    ).stdout

    assert decoded == data


def test_signal_numbers_are_linux_names() -> None:
    assert framing.signal_name(9) == "SIGKILL"
    assert framing.signal_name(15) == "SIGTERM"
    assert framing.signal_name(35) == "SIGRT1"
