"""``_http.Stream.finish``: the rest of a body is read only within its bounds."""

from __future__ import annotations

import requests
import responses

from createos_sync._http import DRAIN_BYTES, Stream

URL = "https://api.test/v1/stream"
EXIT = b'{"type":"exit","exit_code":0}\n'


def opened(body: bytes) -> Stream:
    with responses.RequestsMock() as mock:
        mock.add(responses.GET, URL, body=body)
        return Stream(requests.get(URL, stream=True, timeout=5), "output connection")


def test_a_short_rest_is_read_and_the_end_seen() -> None:
    stream = opened(EXIT + b'{"type":"heartbeat"}\n')
    chunks = stream.chunks(len(EXIT))
    assert next(chunks) == EXIT
    assert stream.finish() is True
    assert list(chunks) == []  # nothing left for the reader either
    stream.close()


def test_more_than_the_byte_bound_is_not_read_to_the_end() -> None:
    stream = opened(EXIT + b"x" * (4 * DRAIN_BYTES))
    chunks = stream.chunks(len(EXIT))
    assert next(chunks) == EXIT
    assert stream.finish(limit=DRAIN_BYTES) is False
    stream.close()


def test_no_time_left_reads_nothing() -> None:
    stream = opened(EXIT + b"rest")
    assert stream.finish(seconds=0.0) is False
    stream.close()
