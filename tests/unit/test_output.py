"""Bounded capture: the last ``max_output`` characters, in bounded memory, without recopying."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync._output import Capture, TailBuffer, fan_out

TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


def tail(text: str, limit: int) -> str:
    return text[len(text) - limit :] if len(text) > limit else text


@given(st.lists(TEXTS, max_size=60), st.integers(0, 120))
def test_keeps_exactly_the_last_limit_characters(writes: list[str], limit: int) -> None:
    buffer = TailBuffer(limit)
    for text in writes:
        buffer.write(text)
    full = "".join(writes)
    assert buffer.getvalue() == tail(full, limit)
    assert buffer.truncated == (len(full) > limit)


@given(
    st.lists(st.integers(1, 3 * TailBuffer.BATCH), min_size=1, max_size=12),
    st.integers(0, 4 * TailBuffer.BATCH),
)
def test_big_and_small_writes_mixed(sizes: list[int], limit: int) -> None:
    buffer = TailBuffer(limit)
    writes = [chr(0x41 + i % 26) * size for i, size in enumerate(sizes)]
    for text in writes:
        buffer.write(text)
    assert buffer.getvalue() == tail("".join(writes), limit)


def test_reading_midway_then_writing_on() -> None:
    buffer = TailBuffer(5)
    buffer.write("abc")
    assert buffer.getvalue() == "abc"
    assert not buffer.truncated
    buffer.write("defg")
    assert buffer.getvalue() == "cdefg"
    assert buffer.getvalue() == "cdefg"
    assert buffer.truncated


@pytest.mark.parametrize("write_size", [1, 100, TailBuffer.BATCH, 65536])
def test_memory_stays_within_limit_plus_one_chunk(write_size: int) -> None:
    limit = 50_000
    buffer = TailBuffer(limit)
    text = "é" * write_size
    for _ in range(400_000 // write_size + 1):
        buffer.write(text)
        assert buffer.held <= limit + max(TailBuffer.BATCH, write_size) * 2
    assert buffer.getvalue() == "é" * limit


def test_a_tail_that_fits_is_returned_without_a_copy() -> None:
    buffer = TailBuffer(1 << 20)
    frame = "x" * (2 * TailBuffer.BATCH)
    buffer.write(frame)
    assert buffer.getvalue() is frame


def test_capture_sorts_streams_and_reports_truncation() -> None:
    capture = Capture(3)
    deliver = fan_out(capture.write, None)
    deliver("stdout", "abcd")
    deliver("stderr", "é")
    assert capture.stdout.getvalue() == "bcd"
    assert capture.stderr.getvalue() == "é"
    assert capture.truncated


def test_fan_out_calls_every_sink_in_order() -> None:
    seen: list[tuple[str, str, str]] = []
    deliver = fan_out(
        lambda s, t: seen.append(("a", s, t)), None, lambda s, t: seen.append(("b", s, t))
    )
    deliver("stdout", "x")
    assert seen == [("a", "stdout", "x"), ("b", "stdout", "x")]
