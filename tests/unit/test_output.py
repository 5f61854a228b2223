"""Bounded capture: the last ``max_output`` characters of UTF-8 bytes, decoded once, in bounded
memory."""

from __future__ import annotations

import codecs

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync._commands.output import ByteTail, Capture, Output, TailBuffer, fan_out

TEXTS = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
# Any bytes at all: valid UTF-8 cut anywhere, lone continuation bytes, overlong and
# truncated sequences, surrogates. What a command writes is not ours to choose.
BYTES = st.binary(max_size=40)


def small_batches(batch: int, limit: int) -> TailBuffer:
    """A buffer that batches only writes under ``batch`` bytes, so that tiny examples
    reach the dropping of whole chunks."""

    class Buffer(TailBuffer):
        BATCH = batch

    return Buffer(limit)


def tail(text: str, limit: int) -> str:
    return text[len(text) - limit :] if len(text) > limit else text


def incremental(writes: list[bytes]) -> str:
    """What live callbacks receive for the same frames, joined."""
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    return "".join(decoder.decode(data) for data in writes) + decoder.decode(b"", final=True)


@given(st.lists(BYTES, max_size=60), st.integers(0, 120), st.sampled_from([1, 3, 16, 8192]))
def test_keeps_exactly_the_last_limit_characters_of_any_bytes(
    writes: list[bytes], limit: int, batch: int
) -> None:
    buffer = small_batches(batch, limit)
    for data in writes:
        buffer.write(data)
    full = incremental(writes)
    assert buffer.getvalue() == tail(full, limit)
    assert buffer.truncated == (len(full) > limit)


@given(st.lists(TEXTS, max_size=30), st.data(), st.integers(0, 120), st.sampled_from([1, 5]))
def test_multibyte_text_cut_anywhere(
    texts: list[str], data: st.DataObject, limit: int, batch: int
) -> None:
    encoded = "".join(texts).encode()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(encoded)), max_size=20)))
    writes = [encoded[a:b] for a, b in zip([0, *cuts], [*cuts, len(encoded)], strict=True)]
    buffer = small_batches(batch, limit)
    for chunk in writes:
        buffer.write(chunk)
    assert buffer.getvalue() == tail("".join(texts), limit)


@given(
    st.lists(st.one_of(st.binary(max_size=400), TEXTS.map(str.encode)), max_size=20),
    st.integers(0, 30),
    st.sampled_from([1, 64, 8192]),
)
def test_writes_longer_than_a_small_limit_takes_are_cut_from_their_end(
    writes: list[bytes], limit: int, batch: int
) -> None:
    """A write over 4 bytes a character of ``limit`` is counted from its end (the tail alone
    may hold the last characters), lone continuation bytes included."""
    buffer = small_batches(batch, limit)
    longest = max(map(len, writes), default=0)
    for data in writes:
        buffer.write(data)
        assert buffer.held <= 4 * limit + longest + 3 * batch
    full = incremental(writes)
    assert buffer.getvalue() == tail(full, limit)
    assert buffer.truncated == (len(full) > limit)


def test_reading_midway_then_writing_on() -> None:
    buffer = small_batches(1, 5)
    buffer.write(b"abc")
    assert buffer.getvalue() == "abc"
    assert not buffer.truncated
    buffer.write(b"d\xc3")  # é cut in two
    buffer.write(b"\xa9fg")
    assert buffer.getvalue() == "cdéfg"
    assert buffer.getvalue() == "cdéfg"
    assert buffer.truncated


def test_a_cut_on_a_character_boundary_is_still_truncation() -> None:
    buffer = small_batches(1, 4)
    for chunk in (b"ab", b"cd", b"ef", b"gh"):
        buffer.write(chunk)
    assert buffer.getvalue() == "efgh"
    assert buffer.truncated


@pytest.mark.parametrize("char", ["x", "é", "日", "🙂"])
@pytest.mark.parametrize("write_chars", [1, 100, 8192, 65536])
def test_memory_stays_within_limit_characters_plus_one_chunk(char: str, write_chars: int) -> None:
    limit = 50_000
    buffer = TailBuffer(limit)
    chunk = (char * write_chars).encode()
    for _ in range(400_000 // write_chars + 1):
        buffer.write(chunk)
        assert buffer.held <= limit * len(char.encode()) + len(chunk) + 3 * TailBuffer.BATCH
    assert buffer.getvalue() == char * limit
    assert buffer.truncated


def test_max_output_zero_keeps_nothing_but_says_so() -> None:
    buffer = TailBuffer(0)
    buffer.write(b"abc")
    assert buffer.getvalue() == ""
    assert buffer.truncated
    assert TailBuffer(0).getvalue() == ""
    assert not TailBuffer(0).truncated


def test_capture_sorts_streams_and_reports_truncation() -> None:
    capture = Capture(3)
    capture.write("stdout", b"abcd")
    capture.write("stderr", "é".encode())
    assert capture.stdout.getvalue() == "bcd"
    assert capture.stderr.getvalue() == "é"
    assert capture.truncated


def test_fan_out_calls_every_sink_in_order() -> None:
    seen: list[tuple[str, str, str]] = []
    deliver = fan_out(
        lambda s, t: seen.append(("a", s, t)), None, lambda s, t: seen.append(("b", s, t))
    )
    assert deliver is not None
    deliver("stdout", "x")
    assert seen == [("a", "stdout", "x"), ("b", "stdout", "x")]
    assert fan_out(None, None) is None


@given(st.lists(BYTES, max_size=60), st.integers(0, 120))
def test_byte_tail_keeps_exactly_the_last_bytes(writes: list[bytes], limit: int) -> None:
    class Buffer(ByteTail):
        BATCH = 3  # reach the trimming of the front with tiny examples

    buffer = Buffer(limit)
    for data in writes:
        buffer.write(data)
        assert buffer.held <= 2 * limit + 3 + len(data)
    whole = b"".join(writes)
    assert buffer.getvalue() == (whole[len(whole) - limit :] if len(whole) > limit else whole)
    assert buffer.truncated == (len(whole) > limit)


@given(st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), BYTES), max_size=30))
def test_output_decodes_each_stream_incrementally_for_live_sinks(
    frames: list[tuple[str, bytes]],
) -> None:
    seen: dict[str, list[str]] = {"stdout": [], "stderr": []}
    output = Output(1 << 20, sinks=(lambda s, t: seen[s].append(t),))
    for stream, data in frames:
        output.write(stream, data)
    output.end()
    for name in ("stdout", "stderr"):
        raw = [data for stream, data in frames if stream == name]
        assert "".join(seen[name]) == incremental(raw) == b"".join(raw).decode("utf-8", "replace")
        assert getattr(output, name) == "".join(seen[name])


@given(st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), BYTES), max_size=30))
def test_output_without_text_hands_on_and_keeps_the_bytes(
    frames: list[tuple[str, bytes]],
) -> None:
    seen: list[tuple[str, bytes]] = []
    output = Output(1 << 20, text=False, sinks=(lambda s, b: seen.append((s, b)), None))
    for stream, data in frames:
        output.write(stream, data)
    output.end()
    assert seen == [(stream, data) for stream, data in frames if data]
    for name in ("stdout", "stderr"):
        assert getattr(output, name) == b"".join(d for s, d in frames if s == name)


def test_output_sees_a_character_split_across_frames_whole() -> None:
    seen: list[str] = []
    output = Output(10, sinks=(lambda s, t: seen.append(t),))
    for byte in "€".encode():
        output.write("stdout", bytes([byte]))
    output.write("stdout", b"\xe2")
    output.end()
    assert seen == ["€", "\ufffd"]
