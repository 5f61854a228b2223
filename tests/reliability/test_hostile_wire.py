"""Hostile answers from the service: output streams and JSON envelopes, property-based.

The output stream is driven through the real ``Follower`` with a fake
service (``FakeJournal``) that serves a process's journal the way CreateOS
may: split at any byte, cut at any byte, replaying frames already seen,
with heartbeats and frame types from the future mixed in. Whatever it does
within the protocol, the follower must deliver every byte once, in order;
whatever it does outside it, the follower must raise ``ProtocolError``
(``OutputLostError`` for lost frames) and never deliver anything that was
not sent. Envelopes of every wrong shape must be ``ProtocolError`` too,
through ``decode_envelope`` and through a client over ``responses``.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import responses
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

import createos_sync as cs
from createos_sync._commands.follow import Follower
from createos_sync._commands.output import Output
from createos_sync._wire.answers import decode_envelope
from createos_sync._wire.deadline import Deadline
from createos_sync._wire.ndjson import MAX_LINE_BYTES, Exit
from createos_sync.errors import CreateosApiError, Operation

from .support import KEY, examples

# --- a fake output service ------------------------------------------------------------


@attrs.frozen
class Frame:
    seq: int
    stream: str
    data: bytes

    def line(self, payload: str | None = None, *, compact: bool = False) -> bytes:
        """The NDJSON line: the service's compact layout, or spaced like any JSON writer."""
        encoded = base64.b64encode(self.data).decode() if payload is None else payload
        body = {"type": "data", "seq": self.seq, "stream": self.stream, "data_base64": encoded}
        separators = (",", ":") if compact else (", ", ": ")
        return json.dumps(body, separators=separators).encode() + b"\n"


EXIT = b'{"type": "exit", "exit_code": 0}\n'
NOISE = (
    b'{"type": "heartbeat"}\n',
    b'{"type": "resize", "rows": 24, "cols": 80}\n',  # a frame type from the future
    b'{"type": "metrics", "cpu": [1, 2, {"x": null}]}\n',
    b"\n",
    b"  \r\n",
)


class FakeStream:
    """What ``Transport.stream`` returns, over bytes in memory: the chunks, then EOF or a cut."""

    def __init__(self, chunks: list[bytes], cut: bool) -> None:
        self._chunks = chunks
        self._cut = cut
        self.closed = False

    def chunks(self, size: int = 65536) -> Iterator[bytes]:
        yield from self._chunks
        if self._cut:
            raise CreateosApiError(Operation.OUTPUT_CONNECTION, None, detail="the stream broke")

    def finish(self) -> bool:
        """After the exit frame the follower reads the body's end (nothing more here)."""
        return True

    def close(self) -> None:
        self.closed = True

    def __enter__(self) -> FakeStream:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@attrs.define
class Connection:
    """How one connection is served: frames already seen replayed, noise, splits, a cut."""

    replay: int = 0  # frames at or before `after` sent again (the client must skip them)
    noise: list[tuple[int, int]] = attrs.field(factory=list)  # (position, NOISE index)
    splits: list[int] = attrs.field(factory=list)  # byte offsets where chunks end
    cut_at: int | None = None  # bytes sent before the connection breaks
    compact: bool = True  # the service's own layout, or another a JSON writer may produce


class FakeJournal:
    """Serves ``frames`` then an exit frame, one ``Connection`` plan per connect."""

    def __init__(self, frames: list[Frame], plans: list[Connection], exit_line: bytes = EXIT):
        self.frames = frames
        self.plans = list(plans)
        self.exit_line = exit_line
        self.connects: list[int] = []
        self.streams: list[FakeStream] = []

    def body(self, after: int, plan: Connection) -> bytes:
        lines = [f.line(compact=plan.compact) for f in self.frames if f.seq > after - plan.replay]
        for position, which in sorted(plan.noise, reverse=True):
            lines.insert(min(position, len(lines)), NOISE[which])
        return b"".join(lines) + self.exit_line

    def open(self, after: int, deadline: Deadline) -> FakeStream:
        self.connects.append(after)
        plan = self.plans.pop(0) if self.plans else Connection()
        body = self.body(after, plan)
        cut = plan.cut_at is not None and plan.cut_at < len(body)
        if cut:
            body = body[: plan.cut_at]
        stream = FakeStream(split(body, plan.splits), cut)
        self.streams.append(stream)
        return stream


def split(body: bytes, offsets: list[int]) -> list[bytes]:
    points = sorted({o for o in offsets if 0 < o < len(body)})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


class Collected:
    """What the follower keeps, fed to an ``Output`` and decoded live as a callback sees it."""

    def __init__(self) -> None:
        self.text = {"stdout": "", "stderr": ""}
        self.output = Output(0, sinks=(self.take,))

    def take(self, stream: str, text: str) -> None:
        self.text[stream] += text

    def __call__(self, stream: str, data: bytes) -> None:
        self.output.write(stream, data)


def follow(journal: FakeJournal) -> tuple[Exit | None, Collected]:
    got = Collected()
    follower = Follower(journal.open, got, sleep=lambda seconds: None)
    exit_frame = follower.follow(Deadline.after(60))
    got.output.end()
    return exit_frame, got


def expected_text(frames: list[Frame]) -> dict[str, str]:
    return {
        name: b"".join(f.data for f in frames if f.stream == name).decode("utf-8", "replace")
        for name in ("stdout", "stderr")
    }


# Payloads that split multi-byte characters, and raw bytes that are not UTF-8 at all.
payloads = st.one_of(
    st.text(max_size=12).map(lambda t: t.encode("utf-8")),
    st.binary(max_size=12),
    st.sampled_from([b"\xc3", b"\xa9", b"\xe2\x82", b"\xac", b"\xf0\x9d", b"\x84\x9e"]),
)


@st.composite
def journals(draw: st.DrawFn) -> list[Frame]:
    items = draw(st.lists(st.tuples(st.sampled_from(["stdout", "stderr"]), payloads), max_size=12))
    return [Frame(i + 1, stream, data) for i, (stream, data) in enumerate(items)]


connections = st.builds(
    Connection,
    replay=st.integers(0, 4),
    noise=st.lists(st.tuples(st.integers(0, 15), st.integers(0, len(NOISE) - 1)), max_size=4),
    splits=st.lists(st.integers(0, 2000), max_size=12),
    cut_at=st.one_of(st.none(), st.integers(0, 2000)),
    compact=st.booleans(),
)


# --- within the protocol: exact delivery --------------------------------------------


@settings(max_examples=examples(100), deadline=None)
@given(frames=journals(), plans=st.lists(connections, max_size=4))
def test_any_framing_drops_and_replays_deliver_every_byte_once(
    frames: list[Frame], plans: list[Connection]
) -> None:
    # At most 4 drops in a row: the follower gives up after 5 without progress.
    journal = FakeJournal(frames, plans)

    exit_frame, got = follow(journal)

    assert exit_frame == Exit(0, None)
    assert got.text == expected_text(frames)
    assert all(stream.closed for stream in journal.streams)
    # Every reconnection asks for what follows the last frame delivered, never earlier.
    assert journal.connects == sorted(journal.connects)


def fixed_journal() -> list[Frame]:
    """Both streams, characters of 2, 3 and 4 bytes split across frames, invalid bytes."""
    text = "a\u00e9\u20ac\U0001d11e\n".encode()
    pieces = [text[:2], text[2:5], text[5:9], text[9:], b"\xff\xfeend\n", "ü".encode()[:1]]
    pieces.append("ü".encode()[1:] + b"!\n")
    return [Frame(i + 1, "stderr" if i % 3 == 1 else "stdout", p) for i, p in enumerate(pieces)]


def test_a_split_at_every_byte_boundary_changes_nothing() -> None:
    frames = fixed_journal()
    body = FakeJournal(frames, []).body(0, Connection())
    want = expected_text(frames)
    for cut in range(len(body) + 1):
        exit_frame, got = follow(FakeJournal(frames, [Connection(splits=[cut])]))
        assert (exit_frame, got.text) == (Exit(0, None), want), cut
    exit_frame, got = follow(FakeJournal(frames, [Connection(splits=list(range(len(body))))]))
    assert (exit_frame, got.text) == (Exit(0, None), want)


def test_a_cut_at_every_byte_boundary_is_replayed_without_loss_or_duplicates() -> None:
    frames = fixed_journal()
    body = FakeJournal(frames, []).body(0, Connection())
    want = expected_text(frames)
    for cut in range(len(body)):
        # The service replays a few frames the client already has, as it may.
        journal = FakeJournal(frames, [Connection(cut_at=cut), Connection(replay=3)])
        exit_frame, got = follow(journal)
        assert (exit_frame, got.text) == (Exit(0, None), want), cut
        assert len(journal.connects) == 2


# --- outside the protocol: an error, and nothing invented -------------------------------


def defect(
    frames: list[Frame], kind: str, index: int, compact: bool
) -> tuple[list[bytes], type[Exception]]:
    """The journal's lines with one defect at data frame ``index``, and the error expected."""
    lines = [f.line(compact=compact) for f in frames]
    if kind == "gap":  # a frame missing between two others
        del lines[index]
        return lines, cs.OutputLostError
    if kind == "swap":  # two frames out of order
        lines[index], lines[index + 1] = lines[index + 1], lines[index]
        return lines, cs.OutputLostError
    if kind == "base64":
        lines[index] = frames[index].line("@@not base64@@", compact=compact)
        return lines, cs.ProtocolError
    replacement = {
        "not-json": b'{"type": "data", "seq": \n',
        "not-object": b'[1, 2, 3]\n',
        "bad-seq": json.dumps({"type": "data", "seq": "1", "stream": "stdout",
                               "data_base64": ""}).encode() + b"\n",
        "bad-stream": json.dumps({"type": "data", "seq": frames[index].seq, "stream": "stdin",
                                  "data_base64": ""}).encode() + b"\n",
        "empty-exit": b'{"type": "exit"}\n',
        "evicted": b'{"type": "error", "error": "output_offset_expired"}\n',
        "error": json.dumps({"type": "error", "error": f"boom {KEY}"}).encode() + b"\n",
        "oversized": b'{"type": "heartbeat", "pad": "' + b"x" * MAX_LINE_BYTES + b'"}\n',
        "huge-seq": b'{"type":"data","seq":1%s,"stream":"stdout","data_base64":""}\n'
        % (b"0" * 40),
        "seq-twice": b'{"type":"data","seq":1,"stream":"stdout","data_base64":"","seq":0}\n',
        "padding": b'{"type":"data","seq":%d,"stream":"stdout","data_base64":"YQ"}\n'
        % frames[index].seq,
        "deep": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    }[kind]  # fmt: skip
    lines[index] = replacement
    return lines, cs.OutputLostError if kind == "evicted" else cs.ProtocolError


DEFECTS = ("gap", "swap", "base64", "not-json", "not-object", "bad-seq", "bad-stream",
           "empty-exit", "evicted", "error", "oversized", "huge-seq", "seq-twice",
           "padding", "deep")  # fmt: skip


class DefectiveJournal(FakeJournal):
    def __init__(self, lines: list[bytes], splits: list[int]) -> None:
        super().__init__([], [])
        self.lines = lines
        self.splits = splits

    def open(self, after: int, deadline: Deadline) -> FakeStream:
        self.connects.append(after)
        body = b"".join(self.lines) + self.exit_line
        stream = FakeStream(split(body, self.splits), cut=False)
        self.streams.append(stream)
        return stream


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    frames=st.lists(payloads, min_size=2, max_size=8).map(
        lambda ps: [Frame(i + 1, "stdout", p) for i, p in enumerate(ps)]
    ),
    kind=st.sampled_from(DEFECTS),
    where=st.integers(0, 100),
    splits=st.lists(st.integers(0, 400), max_size=8),
    compact=st.booleans(),
)
def test_a_stream_outside_the_protocol_is_an_error_and_nothing_is_invented(
    frames: list[Frame], kind: str, where: int, splits: list[int], compact: bool
) -> None:
    index = where % (len(frames) - 1)  # a gap or a swap needs a frame after it
    lines, error = defect(frames, kind, index, compact)
    journal = DefectiveJournal(lines, splits)
    got = Collected()
    follower = Follower(journal.open, got, sleep=lambda seconds: None)

    with pytest.raises(error) as caught:
        follower.follow(Deadline.after(60))

    # Only output that was sent before the defect was delivered, and in order.
    sent_before = expected_text(frames[:index])["stdout"]
    assert sent_before.startswith(got.text["stdout"])
    assert KEY not in str(caught.value) and "boom" not in str(caught.value)
    assert len(journal.connects) == 1  # a protocol violation is not a reason to reconnect


def test_a_deeply_nested_frame_is_a_protocol_error() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000 + b"\n"
    journal = DefectiveJournal([Frame(1, "stdout", b"a").line(), deep], [])
    with pytest.raises(cs.ProtocolError, match="an output stream line is not JSON"):
        Follower(journal.open, Collected(), sleep=lambda s: None).follow(Deadline.after(60))


def test_an_exit_frame_from_the_future_is_an_error() -> None:
    for line in (b'{"type": "exit", "exit_code": "0"}\n', b'{"type": "exit", "signal": 9}\n'):
        with pytest.raises(cs.ProtocolError, match=r"an exit frame's (exit_code|signal) is not"):
            follow(FakeJournal([Frame(1, "stdout", b"x")], [], exit_line=line))


# --- envelopes ---------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=12,
)
statuses = st.one_of(
    st.sampled_from(["success", "fail", "error", "SUCCESS", " success", "success\x00", ""]),
    json_values,
)
envelopes = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {"status": statuses},
        optional={"data": json_values, "message": json_values, "code": json_values},
    ),
)
MESSAGES = {
    "the answer to {} is not JSON",
    "the answer to {} is not a JSend success envelope",
}


def check_decoded(body: bytes, document: Any) -> None:
    valid = isinstance(document, dict) and document.get("status") == "success"
    try:
        data = decode_envelope(body, "probe")
    except cs.ProtocolError as exc:
        assert not valid
        assert str(exc) in {m.format("probe") for m in MESSAGES}  # nothing of the body
    else:
        assert valid or not body.strip()
        assert data == (document.get("data") if valid else None)


@settings(max_examples=examples(100), deadline=None)
@given(envelopes)
def test_every_wrong_envelope_is_a_protocol_error(document: Any) -> None:
    check_decoded(json.dumps(document).encode(), document)


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_are_a_protocol_error_or_a_valid_envelope(body: bytes) -> None:
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        document = None
    check_decoded(body, document)


@pytest.mark.parametrize(
    "body",
    [
        b"[" * 100_000 + b"]" * 100_000,  # nesting deeper than the JSON decoder recurses
        b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
        b"\xff\xfe\x00",
        b'"\\ud800"',
        b"1e999999",
        b"\x00" * 16,
    ],
    ids=["deep-array", "deep-object", "utf16-bom", "lone-surrogate", "huge-number", "nul"],
)
def test_pathological_bodies_are_protocol_errors(body: bytes) -> None:
    with pytest.raises(cs.ProtocolError, match="the answer to probe is not"):
        decode_envelope(body, "probe")


# --- the same through a client, over responses ------------------------------------------

BASE = "https://api.test"
SB = f"{BASE}/v1/sandboxes/sb-1"


@pytest.fixture
def hostile_client() -> Iterator[cs.Client]:
    with cs.Client(KEY, BASE, requests_per_minute=10**9, sleep=lambda s: None, timeout=5) as c:
        yield c


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(document=envelopes)
@example(document={"status": "success", "data": {"id": "sb-1", "status": "running"}})
@example(document={"status": "success", "data": [{"id": "../x", "status": "running"}]})
@example(document={"status": "success", "data": [{"name": "s-1", "vcpu": 1}]})
def test_reads_answered_with_any_envelope_return_or_raise_protocol_error(
    hostile_client: cs.Client, document: Any
) -> None:
    body = json.dumps(document)

    def first_page_only(request: Any) -> tuple[int, dict[str, str], str]:
        # A page that names a huge total must not keep a test paging until its deadline.
        if "offset=0" in (request.url or ""):
            return 200, {}, body
        return 200, {}, '{"status": "success", "data": []}'

    with responses.RequestsMock(assert_all_requests_are_fired=False) as mock:
        mock.add("GET", SB, body=body, status=200, content_type="application/json")
        mock.add("GET", f"{BASE}/v1/shapes", body=body, status=200)
        mock.add_callback("GET", f"{BASE}/v1/sandboxes", callback=first_page_only)
        for read, kind in (
            (lambda: hostile_client.sandbox("sb-1"), cs.SandboxInfo),
            (hostile_client.shapes, cs.Shape),
            (hostile_client.sandboxes, cs.SandboxInfo),
        ):
            try:
                value = read()
            except cs.ProtocolError as exc:
                assert KEY not in str(exc)
                continue
            values = value if isinstance(value, list) else [value]  # what came back is typed
            assert all(isinstance(v, kind) for v in values), value


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(document=envelopes)
def test_process_creation_answered_with_a_wrong_envelope_poisons_the_lease(
    hostile_client: cs.Client, document: Any
) -> None:
    data = document.get("data") if isinstance(document, dict) else None
    valid = (
        isinstance(document, dict)
        and document.get("status") == "success"
        and isinstance(data, dict)
        and isinstance(data.get("process_id"), str)
        and data["process_id"]
    )
    assume(not valid)
    with responses.RequestsMock() as mock:
        mock.add(
            "POST",
            f"{BASE}/v1/sandboxes",
            status=201,
            json={"status": "success", "data": {"id": "sb-1", "status": "running"}},
        )
        mock.add("POST", f"{SB}/processes", body=json.dumps(document), status=201)
        mock.add("DELETE", SB, json={"status": "success", "data": {"id": "sb-1"}})  # fmt: skip
        box = hostile_client.lease(ttl=None).open()  # the first process creation is the run's
        with pytest.raises(
            cs.ProtocolError, match="the process may have been created; the lease is poisoned"
        ):
            box.run("true")
        with pytest.raises(cs.CreateosCleanupError, match="this lease is poisoned"):
            box.run("true")  # poisoned: refused before any request
        with pytest.raises(cs.CreateosCleanupError) as closing:
            box.close()
        assert closing.value.sandbox_destroyed is True
        assert len(mock.calls) == 3  # created once, never resent; then the destroy
