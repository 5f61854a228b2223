"""The data-line fast path of ``parse_frame`` decodes exactly what a JSON parser would."""

from __future__ import annotations

import base64

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync import ProtocolError
from createos_sync._wire.ndjson import Data, _canonical_data, parse_frame, parse_json_frame
from createos_sync.emulator._machine.journal import Frame
from createos_sync.emulator._service.streams import data_line


def canonical(seq: int, stream: str, payload: bytes) -> bytes:
    return b'{"type":"data","seq":%d,"stream":"%s","data_base64":"%s"}' % (
        seq,
        stream.encode(),
        base64.b64encode(payload),
    )


def by_json(line: bytes) -> object:
    """What the general path (a JSON parser) makes of a line, or the error class it raises."""
    try:
        return parse_json_frame(line)
    except ProtocolError:
        return ProtocolError


def outcome(line: bytes) -> object:
    try:
        return parse_frame(line)
    except ProtocolError:
        return ProtocolError


@given(st.integers(1, 2**53), st.sampled_from(["stdout", "stderr", "pty"]), st.binary())
def test_canonical_lines_decode_like_json(seq: int, stream: str, payload: bytes) -> None:
    line = canonical(seq, stream, payload)
    expected = Data(seq, "stdout" if stream == "pty" else stream, payload)
    assert _canonical_data(line) == expected  # the fast path takes it
    assert parse_frame(line) == by_json(line) == expected


def test_the_emulator_writes_the_canonical_layout() -> None:
    line = data_line(Frame(7, "stderr", "é🙂".encode())).rstrip(b"\n")
    assert line == canonical(7, "stderr", "é🙂".encode())
    assert parse_frame(line) == Data(7, "stderr", "é🙂".encode())


@pytest.mark.parametrize(
    "line",
    [
        # other layouts of the same object: the general path decodes them
        b'{"type": "data", "seq": 1, "stream": "stdout", "data_base64": "QQ=="}',
        b'{"seq":1,"type":"data","stream":"stdout","data_base64":"QQ=="}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"Q\\u0051=="}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ==","extra":1}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ=="} ',
        # hostile or broken lines that start like a canonical one
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ==","x":"\\"}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ==","x":""}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ==","data_base64":"Qg=="}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ=\\"}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"Q Q=="}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ=="',
        b'{"type":"data","seq":01,"stream":"stdout","data_base64":"QQ=="}',
        b'{"type":"data","seq":0,"stream":"stdout","data_base64":"QQ=="}',
        b'{"type":"data","seq":1,"stream":"stdin","data_base64":"QQ=="}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"QQ"}',
        b'{"type":"data","seq":1,"stream":"stdout","data_base64":"!!!!"}',
    ],
)
def test_every_other_line_gets_the_json_answer(line: bytes) -> None:
    assert outcome(line) == by_json(line)


@given(st.binary(max_size=12), st.integers(0, 80), st.binary(min_size=1, max_size=3))
def test_corrupted_canonical_lines_get_the_json_answer(
    payload: bytes, where: int, junk: bytes
) -> None:
    line = canonical(5, "stdout", payload)
    cut = min(where, len(line))
    corrupted = line[:cut] + junk + line[cut:]
    assert outcome(corrupted) == by_json(corrupted)


def test_a_deeply_nested_line_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="an output stream line is not JSON"):
        parse_frame(b"[" * 100_000 + b"]" * 100_000)
