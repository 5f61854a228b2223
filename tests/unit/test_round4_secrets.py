"""Containment round 4, the SDK (issue 35, items 6 to 8): secrets in odd text and in crashes.

6. A lone surrogate (what ``os.environ`` holds for undecodable bytes) in an env
   value, an argv item, ``cwd``, typed or clipboard text is refused before any
   request, naming the argument, never the value; the scrubber never raises.
7. A service quoting one line of a sent value (typed text) without the rest
   shows none of it: each line of a sent value is scrubbed on its own.
8. Disk credentials never show in traceback locals (``pytest -l``, rich, Sentry).
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

import createos_sync as cs
from createos_sync import Client, Lease
from createos_sync._wire.deadline import Deadline
from createos_sync._wire.retry import Repeat
from createos_sync._wire.server_text import scrub

from .wire import KEY, SANDBOX, Service

SECRET = "s3cret-value-71c4"
BAD = SECRET + "\udcff"  # os.environ's form of a non-UTF-8 byte


CALLS: dict[str, tuple[Callable[[Client, Lease], Any], str]] = {
    "lease env": (
        lambda c, b: c.lease(env={"TOKEN": BAD}),
        "the value of environment variable TOKEN",
    ),
    "run env": (lambda c, b: b.run("true", env={"TOKEN": BAD}), "environment variable TOKEN"),
    "run argv": (lambda c, b: b.run(["echo", BAD]), "argv item 1"),
    "run script": (lambda c, b: b.run(f"echo {BAD}"), "the command"),
    "start cwd": (lambda c, b: b.start("true", cwd="/tmp/" + BAD), "cwd"),
    "typed text": (lambda c, b: b.computer.type(BAD), "text"),
    "clipboard text": (lambda c, b: b.computer.set_clipboard(BAD), "text"),
}


@pytest.mark.parametrize("call", CALLS)
def test_a_lone_surrogate_is_refused_before_any_request_naming_the_argument_not_its_value(
    client: Client, service: Service, box: Lease, call: str
) -> None:
    action, argument = CALLS[call]
    before = len(service.calls())
    with pytest.raises(ValueError, match=f"{argument} is not valid Unicode text") as caught:
        action(client, box)
    assert len(service.calls()) == before  # nothing was sent: no process waits at its gate
    shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value.args)
    assert SECRET not in shown and "udcff" not in shown


def test_the_transport_refuses_what_a_caller_forgot_to_check(
    client: Client, service: Service
) -> None:
    with pytest.raises(ValueError, match="is not valid Unicode text") as caught:
        client._transport.call(
            "POST", "/sandboxes", operation="x", repeat=Repeat.SAFE, deadline=Deadline.after(5),
            json_body={"envs": {"A": BAD}},
        )  # fmt: skip
    assert service.calls() == [] and SECRET not in str(caught.value)


_ANY_TEXT = st.text(st.one_of(st.characters(), st.integers(0xD800, 0xDFFF).map(chr)))


@given(text=_ANY_TEXT, secrets=st.lists(_ANY_TEXT, max_size=4))
def test_the_scrubber_never_raises_whatever_it_scrubs(text: str, secrets: list[str]) -> None:
    shown = scrub(text, secrets)
    assert shown is None or isinstance(shown, str)


def test_a_secret_with_a_lone_surrogate_is_scrubbed_in_each_form_an_echo_takes() -> None:
    for echo in (BAD, json.dumps(BAD)[1:-1], "s3cret-value-71c4%FF", "s3cret-value-71c4%ED%B3%BF"):
        assert SECRET not in (scrub(f"bad value {echo} here", [KEY, BAD]) or "")


def test_typed_text_echoed_one_line_without_its_newline_is_scrubbed(
    client: Client, service: Service, box: Lease
) -> None:
    typed = "typed-secret-4f2a line1 here\nsecond line-b7\n"
    message = "cannot type typed-secret-4f2a line1 here; nor second line-b7"
    echo = {"status": "fail", "data": None, "message": message}
    service.add(
        "POST", f"/sandboxes/{SANDBOX}/computer/keyboard/type", 400, body=json.dumps(echo).encode()
    )
    with pytest.raises(cs.CreateosApiError) as caught:
        box.computer.type(typed)
    shown = str(caught.value)
    assert "typed-secret-4f2a" not in shown and "line1 here" not in shown, shown
    assert "second line-b7" not in shown and "cannot type" in shown


def _rendered_with_locals(exc: BaseException) -> str:
    """The SDK's frames of ``exc``'s traceback with their locals (the test's own left out)."""
    assert exc.__traceback__ is not None
    frames = traceback.walk_tb(exc.__traceback__.tb_next)
    return "".join(traceback.StackSummary.extract(frames, capture_locals=True).format())


@pytest.mark.parametrize("operation", ["create_disk", "rotate_disk_credentials"])
def test_disk_credentials_never_show_in_traceback_locals(
    client: Client, service: Service, operation: str
) -> None:
    access, secret = "AKIA-access-5e1d", "secret-key-9c3b0a"
    method, path = ("POST", "/disks") if operation == "create_disk" else ("PATCH", "/disks/disk-1")
    service.add(method, path, body=requests.ConnectionError("reset by peer"))
    with pytest.raises(cs.CreateosError) as caught:
        if operation == "create_disk":
            client.create_disk(
                "cache",
                bucket="b",
                endpoint="https://s3.test",
                access_key=access,
                secret_key=secret,
            )
        else:
            client.rotate_disk_credentials("disk-1", access_key=access, secret_key=secret)
    rendered = _rendered_with_locals(caught.value)
    assert f"{operation}" in rendered  # the frame is there, with its locals
    assert access not in rendered and secret not in rendered, rendered
    assert "***" in rendered
