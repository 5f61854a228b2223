"""Template builds over the wire: the budget, log de-duplication, the failure message."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync import Client

from .wire import API, KEY, Chunked, Service, ndjson

TPL = "tpl-1"
LOGS = f"/templates/{TPL}/logs"
DOCKERFILE = "FROM ubuntu:24.04\nRUN make\n"


def template(status: str, **extra: Any) -> dict[str, Any]:
    return {"id": TPL, "name": "demo", "base": "ubuntu-24.04", "status": status, **extra}


def event(n: int, line: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"ts": f"2026-01-01T00:00:{n:02d}.000Z", "level": "info",
            "line": line if line is not None else f"line {n}", "attempt": 1, "final": False,
            "status": "building", **extra}  # fmt: skip


def final(status: str, n: int = 99) -> dict[str, Any]:
    return event(n, f"build {status}", final=True, status=status)


def dropped() -> io.BufferedReader:
    """A log stream whose connection breaks."""
    return io.BufferedReader(Chunked([], then=requests.ConnectionError("cut")))


def stream(service: Service, body: Any) -> None:
    service.add("GET", LOGS, 200, body, content_type="application/x-ndjson")


def test_a_build_costs_three_requests_and_sends_the_dockerfile(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    stream(service, ndjson(event(1), event(2), final("ready")))
    service.add("GET", f"/templates/{TPL}", body=template("ready", built_at="2026-01-01T00:01:00Z"))
    lines: list[str] = []

    built = client.build_template("demo", DOCKERFILE, base="ubuntu-24.04", on_log=lines.append)

    assert (built.id, built.status, built.built_at is not None) == (TPL, "ready", True)
    assert lines == ["line 1", "line 2", "build ready"]
    assert len(service.mock.calls) == 3
    body = json.loads(service.calls("POST")[0].request.body)
    assert body == {"name": "demo", "dockerfile": DOCKERFILE, "base": "ubuntu-24.04"}
    assert "follow=true" in service.calls("GET", "/logs")[0].request.url


def test_a_replaying_stream_delivers_each_line_once_across_connections(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    stream(service, ndjson(event(1), event(2)))  # ends early: read, then followed again
    service.add("GET", f"/templates/{TPL}", body=template("building"))
    stream(service, dropped())
    stream(service, ndjson(event(1), event(2), event(3), event(4, "same")))
    service.add("GET", f"/templates/{TPL}", body=template("building"))
    stream(service, ndjson(event(1), event(2), event(3), event(4, "same"), event(5, "same"),
                           final("ready")))  # fmt: skip
    service.add("GET", f"/templates/{TPL}", body=template("ready"))
    lines: list[str] = []
    client.build_template("demo", DOCKERFILE, on_log=lines.append)
    # Two equal lines logged at different places are both delivered.
    assert lines == ["line 1", "line 2", "line 3", "same", "same", "build ready"]


def test_a_stream_that_does_not_replay_loses_nothing(client: Client, service: Service) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    stream(service, ndjson(event(1), event(2)))
    service.add("GET", f"/templates/{TPL}", body=template("building"))
    stream(service, ndjson(event(3), final("ready")))  # only what is new
    service.add("GET", f"/templates/{TPL}", body=template("ready"))
    lines: list[str] = []
    client.build_template("demo", DOCKERFILE, on_log=lines.append)
    assert lines == ["line 1", "line 2", "line 3", "build ready"]


def test_a_log_that_ends_early_is_checked_and_followed_again(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    stream(service, ndjson(event(1)))  # ends without its final event
    service.add("GET", f"/templates/{TPL}", body=template("building"))
    stream(service, ndjson(event(1), final("ready")))
    service.add("GET", f"/templates/{TPL}", body=template("ready"))
    assert client.build_template("demo", DOCKERFILE).status == "ready"
    assert len(service.mock.calls) == 5


def test_a_log_that_ends_early_on_a_finished_build_is_not_read_again(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    stream(service, ndjson(event(1)))  # ends without its final event: the build is over
    service.add("GET", f"/templates/{TPL}", body=template("ready", built_at="2026-01-01T00:01:00Z"))
    built = client.build_template("demo", DOCKERFILE)
    assert (built.status, built.built_at is not None) == ("ready", True)
    assert len(service.mock.calls) == 3  # the budget of a build: that read was its final read


def test_a_failed_build_ends_its_message_with_the_scrubbed_log_tail(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, template("pending"))
    noisy = [event(n) for n in range(1, 30)]
    noisy.append(event(30, f"\x1b[31merror:\x1b[0m key {KEY} \x07bell" + "x" * 2000))
    stream(service, ndjson(*noisy, final("failed")))

    with pytest.raises(
        cs.TemplateBuildError, match=r"template 'demo' \(tpl-1\) failed to build"
    ) as caught:
        client.build_template("demo", DOCKERFILE)

    error = caught.value
    assert error.template_id == TPL and len(error.log_tail) == 20
    assert error.log_tail[-2].startswith("error: key [redacted] bell")
    assert len(error.log_tail[-2]) <= 500
    message = str(error)
    assert KEY not in message and "\x1b" not in message and "\x07" not in message
    assert message.endswith("  | build failed")
    assert "| line 12\n" in message and "line 11\n" not in message
    assert len(service.mock.calls) == 2  # no read of a failed template


def test_503_on_submission_is_retried_and_a_lost_answer_is_not(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 503)
    service.add("POST", "/templates", 502)
    with pytest.raises(cs.CreateosApiError, match="HTTP 502 during template build") as caught:
        client.build_template("demo", DOCKERFILE)
    assert caught.value.status == 502 and caught.value.outcome_unknown
    assert len(service.calls("POST")) == 2


def test_a_submission_answer_without_a_plausible_id_is_a_protocol_error(
    client: Client, service: Service
) -> None:
    service.add("POST", "/templates", 201, {"id": "../x", "status": "pending"})
    with pytest.raises(cs.ProtocolError, match="not a plausible id"):
        client.build_template("demo", DOCKERFILE)
    assert len(service.mock.calls) == 1


def test_listing_reads_pages_and_legacy_keys(client: Client, service: Service) -> None:
    service.add("GET", "/templates", body={"templates": [template("ready"), {"id": "tpl-2"}]})
    listed = client.templates()
    assert [(t.id, t.status) for t in listed] == [(TPL, "ready"), ("tpl-2", "unknown")]
    assert isinstance(listed[0], cs.Template)
    assert API in service.calls("GET")[0].request.url


def test_a_key_split_by_an_escape_sequence_is_not_put_back_together(
    client: Client, service: Service
) -> None:
    """Issue 22 (6): escapes are stripped before the key is looked for, in the log and tail."""
    service.add("POST", "/templates", 201, template("pending"))
    split = f"{KEY[:6]}\x1b[0m{KEY[6:]}"
    stream(service, ndjson(event(1, f"leaked {split} and {KEY[:3]}\x07{KEY[3:]}"), final("failed")))
    shown: list[str] = []

    with pytest.raises(cs.TemplateBuildError) as caught:
        client.build_template("demo", DOCKERFILE, on_log=shown.append)

    assert caught.value.log_tail[0] == "leaked [redacted] and [redacted]"
    assert KEY not in str(caught.value) and not any(KEY in line for line in shown)
