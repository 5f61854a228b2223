"""``_http.Stream.finish``: the rest of a body is read only within its bounds."""

from __future__ import annotations

import socket
import threading
import time

import requests
import responses

from createos_sync._wire.http import DRAIN_BYTES, Stream

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


def test_a_silent_server_costs_the_time_bound_not_a_stall() -> None:
    """A real loopback socket: the exit frame, then nothing, the body never ended."""
    release = threading.Event()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def serve() -> None:
            connection, _ = listener.accept()
            with connection:
                connection.recv(65536)
                connection.sendall(
                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                    + b"%x\r\n%s\r\n" % (len(EXIT), EXIT)
                )
                release.wait(30)

        server = threading.Thread(target=serve, daemon=True)
        server.start()
        try:
            with requests.Session() as session:
                response = session.get(f"http://127.0.0.1:{port}/", stream=True, timeout=30)
                stream = Stream(response, "output connection")
                assert next(stream.chunks()) == EXIT
                started = time.monotonic()
                assert stream.finish(seconds=0.2) is False
                assert time.monotonic() - started < 5.0  # generous: the read timeout is 30 s
                stream.close()
        finally:
            release.set()
            server.join(10)
