"""``Client.request``: the escape hatch to any endpoint, with the package's rules."""

from __future__ import annotations

import json
from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync import Client

from .wire import KEY, Service


def test_request_returns_the_envelopes_data_in_one_request(
    client: Client, service: Service
) -> None:
    service.add("GET", "/whoami", body={"account": "acme", "running": 2})
    assert client.request("GET", "/whoami") == {"account": "acme", "running": 2}
    assert len(service.mock.calls) == 1
    assert service.mock.calls[0].request.headers["X-Api-Key"] == KEY


def test_request_sends_json_and_params(client: Client, service: Service) -> None:
    service.add("POST", "/networks", 201, body={"id": "net-1"})
    data = client.request(
        "post", "/v1/networks", json={"name": "n", "cidr": "10.0.0.0/24"}, params={"dry": True}
    )
    assert data == {"id": "net-1"}
    sent = service.mock.calls[0].request
    assert json.loads(sent.body) == {"name": "n", "cidr": "10.0.0.0/24"}
    assert sent.url.endswith("/v1/networks?dry=true")


# method, status answered every time -> requests sent (max_retries=3): PROTOCOL.md by method.
BUDGET = [
    ("GET", 502, 4),
    ("DELETE", 500, 4),
    ("PUT", 504, 4),
    ("POST", 502, 1),
    ("PATCH", 500, 1),
    ("POST", 503, 4),
    ("PATCH", 429, 4),
    ("GET", 404, 1),
    ("POST", 400, 1),
]


@pytest.mark.parametrize(("method", "status", "sent"), BUDGET)
def test_request_budget_follows_the_retry_rules_by_method(
    client: Client, service: Service, method: str, status: int, sent: int
) -> None:
    for _ in range(sent):
        service.add(method, "/disks/d-1", status)
    with pytest.raises(cs.CreateosApiError, match=f"HTTP {status} during API request") as caught:
        client.request(method, "/disks/d-1")
    assert caught.value.status == status and caught.value.operation == "API request"
    assert len(service.mock.calls) == sent


def test_a_lost_answer_to_a_post_is_not_repeated(client: Client, service: Service) -> None:
    service.add("POST", "/ssh-keys", body=requests.ConnectionError("reset"))
    with pytest.raises(cs.CreateosApiError, match="no answer during API request") as caught:
        client.request("POST", "/ssh-keys", json={"key": "ssh-ed25519 AAAA"})
    assert caught.value.outcome_unknown and "may have taken effect" in str(caught.value)
    assert len(service.mock.calls) == 1


def test_request_errors_are_secret_safe(client: Client, service: Service) -> None:
    echo = {"status": "fail", "data": None, "message": f"bad value s3cr3t-v4lue for {KEY}"}
    service.add("PUT", "/ssh-keys/k-1", 422, body=json.dumps(echo).encode())
    with pytest.raises(cs.CreateosApiError) as caught:
        client.request("PUT", "/ssh-keys/k-1", json={"key": "s3cr3t-v4lue"})
    assert str(caught.value) == ("HTTP 422 during API request: bad value [redacted] for [redacted]")


@pytest.mark.parametrize(
    "path",
    [
        "http://evil.test/v1/whoami",
        "https://api.test/v1/whoami",
        "//evil.test/whoami",
        "whoami",
        "",
        "/",
        "/v1/",
        "/../whoami",
        "/sandboxes/../../x",
        "/sandboxes/./x",
        "/whoami?limit=1",
        "/whoami#frag",
        "/%2e%2e/x",
        "/who ami",
        "/whoami\n",
        "/sandboxes\\x",
        "/a//b",
        "/..;/admin",  # issue 22 (12): servers such as Tomcat read "..;" as ".."
        "/sandboxes/x;a=b",
        "/.../x",
    ],
)
def test_a_path_that_is_not_a_relative_api_path_is_refused_before_any_request(
    client: Client, service: Service, path: str
) -> None:
    with pytest.raises(ValueError, match="must be an API path"):
        client.request("GET", path)
    assert len(service.mock.calls) == 0


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("FETCH", "/x"), {}, ValueError, "method must be one of DELETE, GET"),
        ((1, "/x"), {}, TypeError, "method must be a str such as 'GET'"),
        (("GET", b"/x"), {}, TypeError, "path must be a str such as '/whoami'"),
        (
            ("POST", "/x"),
            {"json": {"a": object()}},
            TypeError,
            r"json must be JSON-serialisable \(TypeError\)",
        ),
        (
            ("POST", "/x"),
            {"json": {"a": float("nan")}},
            TypeError,
            r"json must be JSON-serialisable \(ValueError\)",
        ),
        (
            ("GET", "/x"),
            {"params": {"a": None}},
            TypeError,
            r"params\['a'\] must be a str, int, finite float or bool",
        ),
        (
            ("GET", "/x"),
            {"params": [("a", "b")]},
            TypeError,
            "params must be a mapping of names to str",
        ),
    ],
)
def test_bad_arguments_are_refused_before_any_request(
    client: Client,
    service: Service,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    error: type,
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        client.request(*args, **kwargs)
    assert len(service.mock.calls) == 0


@pytest.mark.parametrize("method", ["sandbox", "destroy", "template", "delete_template"])
@pytest.mark.parametrize("bad", ["", None, 7])
def test_an_id_that_is_not_a_non_empty_str_is_refused_before_any_request(
    client: Client, service: Service, method: str, bad: Any
) -> None:
    # An empty id would name the collection instead: GET /sandboxes/ is the listing.
    with pytest.raises(ValueError, match="must be a non-empty str"):
        getattr(client, method)(bad)
    assert len(service.mock.calls) == 0


def test_rootfs_lists_the_catalogs_names_in_one_request(client: Client, service: Service) -> None:
    service.add("GET", "/rootfs", body={"rootfs": ["ubuntu:24.04", "debian:12", 7]})
    assert client.rootfs() == ["ubuntu:24.04", "debian:12"]  # what is not a name is dropped
    assert len(service.mock.calls) == 1


def test_a_clients_transport_is_private() -> None:
    """Everything goes through ``Client``'s methods (and ``request``, the escape hatch)."""
    with Client("k", "http://127.0.0.1:9") as client:
        assert not hasattr(client, "transport")
