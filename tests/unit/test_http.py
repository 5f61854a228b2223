"""The transport: envelopes, error mapping, retry classes, Retry-After, redirects, secrets."""

from __future__ import annotations

import email.utils
import json
import traceback
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
import requests
import urllib3

import createos_sync as cs
from createos_sync import Client
from createos_sync._wire.answers import parse_retry_after

from .wire import API, KEY, SANDBOX, Service, sandbox


def test_success_envelope_is_unwrapped(client: Client, service: Service) -> None:
    service.add(
        "GET", f"/sandboxes/{SANDBOX}", body=sandbox(created_at="2026-12-01T10:00:00Z", extra=1)
    )
    info = client.sandbox(SANDBOX)
    assert info.id == SANDBOX and info.status == "running" and info.created_at is not None


@pytest.mark.parametrize(
    "body",
    [b"not json", b"[1, 2]", b'{"status": "fail", "data": {}}', b'{"data": {"id": "x"}}'],
)
def test_malformed_envelope_is_a_protocol_error(
    client: Client, service: Service, body: bytes
) -> None:
    service.add("GET", f"/sandboxes/{SANDBOX}", body=body)
    with pytest.raises(cs.ProtocolError, match="the answer to sandbox lifecycle is not"):
        client.sandbox(SANDBOX)


def test_api_error_carries_status_operation_and_request_id(
    client: Client, service: Service
) -> None:
    service.add("GET", f"/sandboxes/{SANDBOX}", 403, headers={"X-Request-Id": "r-9"})
    with pytest.raises(
        cs.CreateosApiError, match=r"HTTP 403 during sandbox lifecycle \(request id r-9\)"
    ) as caught:
        client.sandbox(SANDBOX)
    error = caught.value
    assert (error.status, error.operation, error.request_id) == (403, "sandbox lifecycle", "r-9")
    # The service's message, once the key it echoed is removed (see wire.failure).
    assert str(error) == "HTTP 403 during sandbox lifecycle (request id r-9): failed [redacted]"
    assert error.server_message == "failed [redacted]"


def test_error_body_echoing_the_key_never_reaches_message_or_repr(
    client: Client, service: Service
) -> None:
    service.add("PUT", f"/sandboxes/{SANDBOX}/files", 400)  # the body echoes KEY (see wire.failure)
    service.open_running()
    box = client.lease().open()
    with pytest.raises(cs.CreateosApiError) as caught:
        box.write_file("/workspace/secret-name.txt", b"x")
    for text in (str(caught.value), repr(caught.value), repr(caught.value.args)):
        assert KEY not in text and "secret-name" not in text and "echo" not in text
    service.close(box)


def test_redirects_are_refused_and_never_followed(client: Client, service: Service) -> None:
    service.add("GET", "/shapes", 302, body=b"", headers={"Location": "https://evil.test/steal"})
    with pytest.raises(cs.CreateosApiError, match="redirect refused") as caught:
        client.shapes()
    assert caught.value.status == 302
    assert len(service.mock.calls) == 1


def test_429_honours_retry_after_then_succeeds(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.add("GET", "/shapes", 429, headers={"Retry-After": "7"})
    service.add(
        "GET", "/shapes", body={"data": [{"id": "s-1vcpu-1gb", "vcpu": 1, "mem_mib": 1024}]}
    )
    shapes = client.shapes()
    assert sleeps == [7.0]
    assert shapes[0].id == "s-1vcpu-1gb" and shapes[0].memory_mib == 1024


def test_429_retry_after_past_the_deadline_is_raised_not_waited(service: Service) -> None:
    slept: list[float] = []
    with Client(
        KEY, "https://api.test", timeout=5, requests_per_minute=10**9, sleep=slept.append
    ) as c:
        service.add("GET", "/shapes", 429, headers={"Retry-After": "60"})
        with pytest.raises(cs.CreateosApiError, match="HTTP 429 during catalog lookup") as caught:
            c.shapes()
    assert caught.value.status == 429 and caught.value.retry_after == 60 and slept == []


def test_creation_is_retried_after_429(client: Client, service: Service) -> None:
    service.create_sandbox(http=429)
    service.open_running()
    box = client.lease().open()
    assert box.id == SANDBOX
    service.close(box)


# (method path, operation) -> how many attempts a status gets with max_retries=3.
RETRY_TABLE = [
    ("GET", 503, 4),
    ("GET", 500, 4),
    ("GET", 404, 1),
    ("GET", 400, 1),
    ("POST", 503, 4),  # process creation: 503 means "not processed", so it is retried
    ("POST", 500, 1),  # but never repeated after a 5xx that may have taken effect
    ("POST", 502, 1),
    ("POST", 504, 1),
    ("GET", 408, 1),  # the long poll's "not yet": its caller decides, not the transport
    ("POST", 429, 4),
    ("DELETE", 503, 4),  # sandbox destroy is idempotent
]


@pytest.mark.parametrize(("method", "status", "attempts"), RETRY_TABLE)
def test_retry_decisions(
    client: Client, service: Service, method: str, status: int, attempts: int
) -> None:
    service.open_running()
    box = client.lease().open()
    path = {
        "GET": f"/sandboxes/{SANDBOX}",
        "POST": f"/sandboxes/{SANDBOX}/processes",
        "DELETE": f"/sandboxes/{SANDBOX}",
    }[method]
    for _ in range(attempts):
        service.add(method, path, status)
    call = {
        "GET": box.info,
        "POST": lambda: box.run("true"),
        "DELETE": lambda: client.destroy(SANDBOX),
    }
    with pytest.raises(cs.CreateosApiError, match=f"HTTP {status} during ") as caught:
        call[method]()
    assert caught.value.status == status
    assert len(service.calls(method, path)) == attempts
    if method == "POST" and attempts == 1:  # a creation of unknown outcome poisons the lease
        with pytest.raises(cs.CreateosCleanupError, match="unknown outcome; sandbox sb-1 was"):
            service.close(box)
    else:
        service.close(box)


def test_connection_never_made_is_retried_even_for_creation(
    client: Client, service: Service
) -> None:
    refused = requests.ConnectionError(
        urllib3.exceptions.MaxRetryError(
            None, "/", urllib3.exceptions.NewConnectionError(None, "refused")
        )  # type: ignore[arg-type]
    )
    service.add("POST", "/sandboxes", body=refused)
    service.open_running()
    box = client.lease().open()
    assert box.id == SANDBOX
    service.close(box)


def test_lost_answer_to_creation_is_not_retried(client: Client, service: Service) -> None:
    service.open_running()
    box = client.lease(on_exit="keep").open()
    service.add("POST", f"/sandboxes/{SANDBOX}/processes", body=requests.ConnectionError("reset"))
    with pytest.raises(cs.CreateosApiError) as caught:
        box.run("true")
    assert caught.value.status is None and caught.value.outcome_unknown
    assert "reset" not in str(caught.value)
    assert len(service.calls("POST", "/processes")) == 1
    with pytest.raises(cs.CreateosCleanupError, match="sandbox sb-1 was destroyed instead"):
        service.close(box)  # on_exit="keep" gives way: a poisoned lease destroys its sandbox


def test_404_on_destroy_is_success_and_says_it_was_already_gone(
    client: Client, service: Service
) -> None:
    service.destroy_sandbox(http=404)
    assert client.destroy(SANDBOX) is False
    service.destroy_sandbox()
    assert client.destroy(SANDBOX) is True


def test_query_string_never_reaches_an_error_message(client: Client, service: Service) -> None:
    service.open_running()
    box = client.lease().open()
    service.add(
        "GET",
        f"/sandboxes/{SANDBOX}/files",
        body=requests.ConnectionError(f"{API}/x?path=/private/key"),
    )
    for _ in range(3):
        service.add(
            "GET",
            f"/sandboxes/{SANDBOX}/files",
            body=requests.ConnectionError("again ?path=/private/key"),
        )
    with pytest.raises(cs.CreateosApiError) as caught:
        box.read_file("/private/key")
    assert "/private/key" not in str(caught.value) and caught.value.__cause__ is None
    service.close(box)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("12", 12.0),
        ("0", 0.0),
        (None, None),
        ("soon", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", 0.0),
    ],
)
def test_retry_after_parsing(header: str | None, expected: Any) -> None:
    assert parse_retry_after(header) == expected


@pytest.mark.parametrize("listing", ["sandboxes", "templates"])
def test_listings_follow_pages(client: Client, service: Service, listing: str) -> None:
    first = [sandbox(sandbox_id=f"sb-{i}") for i in range(500)]
    service.add(
        "GET",
        f"/{listing}",
        body={"data": first, "pagination": {"total": 501, "limit": 500, "offset": 0}},
    )
    service.add(
        "GET",
        f"/{listing}",
        body={"data": [sandbox(sandbox_id="sb-last")], "pagination": {"total": 501}},
    )
    ids = [item.id for item in getattr(client, listing)()]
    assert len(ids) == 501 and ids[-1] == "sb-last"
    assert len(service.mock.calls) == 2
    assert "limit=500&offset=500" in service.mock.calls[1].request.url


def test_shapes_accept_the_legacy_key(client: Client, service: Service) -> None:
    service.add(
        "GET", "/shapes", body={"shapes": [{"id": "s-1vcpu-256mb", "vcpu": 1, "mem_mib": 256}]}
    )
    assert [s.id for s in client.shapes()] == ["s-1vcpu-256mb"]


# --- the real service's wire (issue 10, issue 9 items 11 to 13) -------------------------


def test_503_is_retried_even_for_sandbox_creation(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.add("POST", "/sandboxes", 503, headers={"Retry-After": "2"})
    service.open_running()
    box = client.lease().open()  # 503 said "not processed": no lookup by name, no error
    assert box.id == SANDBOX and sleeps == [2.0]
    assert len(service.calls("POST", "/sandboxes")) == 2 and not service.calls("GET")
    service.close(box)


def test_500_on_sandbox_creation_is_not_retried(client: Client, service: Service) -> None:
    service.create_sandbox(http=500)
    service.add("GET", "/sandboxes", body=[])  # the lookup by name finds nothing
    with pytest.raises(
        cs.CreateosApiError,
        match="HTTP 500 during sandbox creation: the creation's outcome was unknown",
    ) as caught:
        client.lease().open()
    assert caught.value.status == 500
    assert len(service.calls("POST", "/sandboxes")) == 1


def test_fractional_retry_after_is_honoured(
    client: Client, service: Service, sleeps: list[float]
) -> None:
    service.add("GET", "/shapes", 429, headers={"Retry-After": "1.5"})
    service.add("GET", "/shapes", 503, headers={"Retry-After": "0.25"})
    service.add("GET", "/shapes", body=[])
    assert client.shapes() == []
    assert sleeps == [1.5, 0.25]


@pytest.mark.parametrize(
    ("header", "expected"),
    [("1.5", 1.5), (" 0.25 ", 0.25), ("-3", 0.0), ("nan", None), ("inf", None), ("1e400", None)],
)
def test_retry_after_may_be_fractional(header: str, expected: float | None) -> None:
    assert parse_retry_after(header) == expected


def test_retry_after_as_a_future_http_date() -> None:
    when = email.utils.format_datetime(datetime.now(timezone.utc) + timedelta(seconds=30), True)
    waited = parse_retry_after(when)
    assert waited is not None and 27 <= waited <= 30


@pytest.mark.parametrize("kind", ["fail", "error"])
def test_a_4xx_shows_the_services_own_message(client: Client, service: Service, kind: str) -> None:
    body = {"status": kind, "message": "unknown shape", "code": 400}
    if kind == "fail":
        body["data"] = None
    service.add("POST", "/sandboxes", 400, body=json.dumps(body).encode())
    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease(shape="s-9vcpu-9gb").open()
    assert str(caught.value) == "HTTP 400 during sandbox creation: unknown shape"
    assert caught.value.server_message == "unknown shape"


def test_a_5xx_body_stays_out_of_the_message(client: Client, service: Service) -> None:
    body = {"status": "error", "message": "internal detail: shard 7 down", "code": 500}
    for _ in range(4):
        service.add("GET", f"/sandboxes/{SANDBOX}", 500, body=json.dumps(body).encode())
    with pytest.raises(cs.CreateosApiError) as caught:
        client.sandbox(SANDBOX)
    assert "shard" not in str(caught.value) and caught.value.server_message is None


def test_402_says_the_account_cannot_create_more(client: Client, service: Service) -> None:
    service.create_sandbox(http=402)
    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease().open()
    assert str(caught.value) == (
        "HTTP 402 during sandbox creation: "
        "the account cannot create more sandboxes: payment required"
    )
    assert len(service.calls("POST", "/sandboxes")) == 1 and not service.calls("GET")


def test_401_says_the_key_was_rejected(client: Client, service: Service) -> None:
    service.add("GET", "/sandboxes", 401)
    with pytest.raises(cs.CreateosApiError, match="the API key was rejected") as caught:
        client.sandboxes()
    assert KEY not in str(caught.value)


def test_the_server_message_is_scrubbed_of_the_key_and_of_every_value_sent(
    client: Client, service: Service
) -> None:
    secret = "hunter2-very-secret"
    echo = {
        "status": "fail",
        "data": None,
        "message": f'env TOKEN={secret} rejected for key {KEY} ("{secret}") ?after=0 \x1b[31m!',
    }
    service.add("POST", "/sandboxes", 400, body=json.dumps(echo).encode())
    with pytest.raises(cs.CreateosApiError) as caught:
        client.lease(env={"TOKEN": secret, "DEBUG": "1"}).open()
    message = str(caught.value)
    assert secret not in message and KEY not in message and "after=0" not in message
    assert "\x1b" not in message
    assert caught.value.server_message == (
        'env TOKEN=[redacted] rejected for key [redacted] ("[redacted]") [redacted] [31m!'
    )


def test_the_server_message_is_bounded(client: Client, service: Service) -> None:
    echo = {"status": "fail", "data": None, "message": "x " * 5000}
    service.add("GET", "/sandboxes", 400, body=json.dumps(echo).encode())
    with pytest.raises(cs.CreateosApiError) as caught:
        client.sandboxes()
    assert caught.value.server_message is not None
    assert len(caught.value.server_message) <= 200 and len(str(caught.value)) < 260


def test_a_hostile_request_id_is_replaced_by_a_placeholder(
    client: Client, service: Service
) -> None:
    service.add("GET", f"/sandboxes/{SANDBOX}", 403, headers={"X-Request-Id": f"r {KEY}"})
    with pytest.raises(cs.CreateosApiError) as caught:
        client.sandbox(SANDBOX)
    assert caught.value.request_id == "(unrecognised)" and KEY not in str(caught.value)


def test_no_frame_of_a_failed_request_shows_the_key_in_its_locals(
    client: Client, service: Service
) -> None:
    for _ in range(4):
        service.add("GET", "/sandboxes", body=requests.ConnectionError("reset"))
    with pytest.raises(cs.CreateosApiError, match="no answer during sandbox listing") as caught:
        client.sandboxes()
    error = caught.value
    shown = traceback.TracebackException(
        type(error), error, error.__traceback__, capture_locals=True
    )
    text = "".join(shown.format())
    assert "operation = 'sandbox listing'" in text  # the locals really were shown
    assert KEY not in text
    assert KEY not in repr({"X-Api-Key": client.config.api_key})  # the key's own repr
