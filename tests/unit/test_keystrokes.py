"""Keystroke batching for ``createos-sync shell``: the policy with a fake clock, the sender live."""

from __future__ import annotations

import threading

from createos_sync.cli._keystrokes import BURST, MAX_BATCH, Batcher, Typist

from ..waiting import wait_until


def test_a_key_after_a_pause_leaves_at_once() -> None:
    batcher = Batcher(now=0.0)
    batcher.type(b"l")
    assert batcher.delay(0.0) == 0.0
    assert batcher.take(0.0) == b"l"
    assert not batcher.pending


def test_keys_typed_together_make_one_request() -> None:
    batcher = Batcher(now=0.0)
    for key in (b"l", b"s", b"\r"):
        batcher.type(key)
    assert batcher.take(0.0) == b"ls\r"


def test_steady_typing_is_paced_to_the_rate_after_a_burst() -> None:
    """docs/how-to/terminals.md: a burst of 4, then at most 2 a second; a minute of steady typing at
    5 keys a second costs about 123 requests, never more than about 124 (literals: the
    docs' figures, not the module's constants)."""
    batcher = Batcher(now=0.0)
    sent: list[float] = []
    keys = 0
    for step in range(1, 60 * 5 + 1):  # 5 keys a second for a minute, checked as typed
        now = step / 5
        keys += 1
        batcher.type(b"k")
        if batcher.delay(now) == 0.0:
            batcher.take(now)
            sent.append(now)
    assert 121 <= len(sent) <= 124 and keys == 300  # about 123, never more than 124
    assert sent[:4] == [0.2, 0.4, 0.6, 0.8]  # a burst of 4 leaves as typed
    assert all(n - 1 <= 2 * t + 4 for n, t in enumerate(sent, 1))  # then 2 a second at most


def test_a_paste_is_split_into_requests_of_at_most_max_batch() -> None:
    batcher = Batcher(now=0.0)
    batcher.type(b"x" * (MAX_BATCH + 10))
    assert len(batcher.take(0.0)) == MAX_BATCH  # type: ignore[arg-type]
    assert batcher.take(0.0) == b"x" * 10


def test_only_the_latest_size_is_sent_in_the_order_typed() -> None:
    batcher = Batcher(now=0.0)
    batcher.type(b"a")
    batcher.resize((30, 90))
    batcher.resize((40, 100))
    assert batcher.take(0.0) == b"a"
    assert batcher.take(0.0) == (40, 100)
    assert not batcher.pending
    # a resize, then `stty size`: the command must see the new size
    batcher.resize((50, 132))
    batcher.type(b"stty size\r")
    batcher.resize((51, 133))
    assert batcher.take(0.0) == (51, 133)
    assert batcher.take(0.0) == b"stty size\r"
    assert not batcher.pending


def test_typist_sends_in_order_without_overlap_and_batches_while_busy() -> None:
    sent: list[bytes] = []
    busy = threading.Lock()
    in_flight = threading.Event()
    release = threading.Event()

    def send(data: bytes) -> None:
        assert busy.acquire(blocking=False), "two requests in flight"
        try:
            sent.append(data)
            in_flight.set()
            release.wait(10)
        finally:
            busy.release()

    typist = Typist(send, lambda rows, cols: None)
    typist.type(b"e")
    assert in_flight.wait(10)
    for key in b"cho hi\r":  # typed while the first request is in flight
        typist.type(bytes([key]))
    release.set()
    wait_until(lambda: b"".join(sent) == b"echo hi\r")
    typist.close(timeout=10)
    assert sent == [b"e", b"cho hi\r"] and typist.requests == 2 and typist.error is None


def test_a_failed_request_stops_the_typist_and_says_so() -> None:
    stopped = threading.Event()

    def send(data: bytes) -> None:
        raise ConnectionError("lost")

    typist = Typist(send, lambda rows, cols: None, on_stop=stopped.set)
    typist.type(b"x")
    assert stopped.wait(10)
    assert isinstance(typist.error, ConnectionError)
    typist.type(b"y")  # ignored: the session is ending
    typist.close(timeout=10)


def test_resizes_go_through_the_typist() -> None:
    sizes: list[tuple[int, int]] = []
    typist = Typist(lambda data: None, lambda rows, cols: sizes.append((rows, cols)))
    typist.resize(40, 100)
    wait_until(lambda: sizes == [(40, 100)])
    typist.close(timeout=10)


def test_close_drops_what_was_not_sent() -> None:
    sent: list[bytes] = []
    typist = Typist(sent.append, lambda r, c: None, clock=lambda: 0.0)  # time stands still
    for _ in range(int(BURST)):  # the burst leaves; then the bucket stays empty
        typist.type(b"k")
        wait_until(lambda: typist.requests == len(sent) and not typist._batcher.pending)
    typist.type(b"late")
    typist.close(timeout=10)
    assert sent == [b"k"] * int(BURST)
    assert not typist._thread.is_alive()
