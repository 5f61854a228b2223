"""The NDJSON frame reader, including hostile framing."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync import OutputLostError, ProtocolError
from createos_sync._wire.ndjson import HEARTBEAT, Data, Error, Exit, parse_frame, split_lines

from .wire import data, exit_frame, ndjson

FRAMES = ndjson(data(1, "a"), {"type": "heartbeat"}, data(2, "é", "stderr"), exit_frame(0))


@given(st.lists(st.integers(0, len(FRAMES)), max_size=8))
def test_lines_survive_any_chunking(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    pieces = [FRAMES[a:b] for a, b in zip([0, *points], [*points, len(FRAMES)], strict=True)]
    assert list(split_lines(pieces)) == FRAMES.splitlines()


def test_every_single_split_point() -> None:
    for cut in range(len(FRAMES) + 1):
        assert list(split_lines([FRAMES[:cut], FRAMES[cut:]])) == FRAMES.splitlines()


def test_trailing_partial_line_is_dropped() -> None:
    assert list(split_lines([b'{"type":"heartbeat"}\n{"type":"da'])) == [b'{"type":"heartbeat"}']


def test_blank_lines_are_skipped() -> None:
    assert list(split_lines([b"\n\r\n  \n" + FRAMES])) == FRAMES.splitlines()


def test_oversized_line_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="line is longer than the protocol allows"):
        list(split_lines([b"x" * 1000] * 10, max_line=5000))
    with pytest.raises(ProtocolError, match="line is longer than the protocol allows"):
        list(split_lines([b"x" * 6000 + b"\n"], max_line=5000))


def test_frame_types() -> None:
    assert parse_frame(json.dumps(data(3, b"\xff", "pty")).encode()) == Data(3, "stdout", b"\xff")
    assert parse_frame(b'{"type": "heartbeat"}') is HEARTBEAT
    assert parse_frame(b'{"type": "exit", "signal": "SIGKILL"}') == Exit(None, "SIGKILL")
    assert parse_frame(b'{"type": "error", "error": "boom"}') == Error("boom")
    assert parse_frame(b'{"type": "resize", "rows": 3}') is None  # unknown: ignored


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b"not json", "an output stream line is not JSON"),
        (b"[1]", "an output stream line is not a JSON object"),
        (b'{"type": "data", "seq": 0, "stream": "stdout", "data_base64": ""}', "no valid seq"),
        (b'{"type": "data", "seq": "1", "stream": "stdout", "data_base64": ""}', "no valid seq"),
        (b'{"type": "data", "seq": true, "stream": "stdout", "data_base64": ""}', "no valid seq"),
        (b'{"type": "data", "seq": 1, "stream": "stdin", "data_base64": ""}', "unknown stream"),
        (
            b'{"type": "data", "seq": 1, "stream": "stdout", "data_base64": "!!"}',
            "data_base64 is not valid base64",
        ),
        (b'{"type": "data", "seq": 1, "stream": "stdout"}', "a data frame has no data_base64"),
        (b'{"type": "exit"}', "an exit frame has neither exit_code nor signal"),
        (b'{"type": "exit", "exit_code": "0"}', "exit_code is not an integer"),
        (b'{"type": "exit", "exit_code": 1.5}', "exit_code is not an integer"),
    ],
)
def test_malformed_frames_are_protocol_errors(line: bytes, message: str) -> None:
    with pytest.raises(ProtocolError, match=message):
        parse_frame(line)


def test_output_lost_is_a_protocol_error() -> None:
    assert issubclass(OutputLostError, ProtocolError)


def test_an_eviction_frame_says_where_the_journal_now_starts() -> None:
    line = b'{"type":"error","error":"output_offset_expired","oldest_available_seq":41}'
    assert parse_frame(line) == Error("output_offset_expired", 41)
    for odd in (b'"41"', b"0", b"true", b"null"):
        bad = b'{"type":"error","error":"output_offset_expired","oldest_available_seq":%s}' % odd
        assert parse_frame(bad) == Error("output_offset_expired", None)


@pytest.mark.parametrize("signal", ["sk-live-SECRET", "SIGKILL; sk-live-SECRET", "kill", "SIG"])
def test_a_hostile_exit_signal_becomes_a_placeholder(signal: str) -> None:
    line = json.dumps({"type": "exit", "signal": signal}).encode()
    assert parse_frame(line) == Exit(None, "(unrecognised)")
