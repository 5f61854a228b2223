"""Secrets: what the key and the bodies may never reach, and what guards the emulator.

CreateOS error bodies may echo the request, key and query string included. On
the emulator's error bodies do not (the fault matrix's malformed bodies do,
see test_fault_matrix.py), so here a scripted service over ``responses``
answers every operation with every error status and a body, headers and
message that echo the key, the query and markers: no exception message,
note, printed traceback, repr or log record (DEBUG included) may show any of
it, except the message of a 4xx, which reaches the user once scrubbed of the
key and of everything the request sent (the rest of the body never does, nor
any part of a 5xx body). Then the emulator's own guards: every endpoint needs the key, compared
in constant time; it listens on loopback only. (Path escapes are refused:
see test_hostile_input.py; the emulator's unit tests cover its pieces.)
"""

from __future__ import annotations

import base64
import inspect
import json
import logging
import re
import socket
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests
import responses

import createos_sync as cs
from createos_sync._commands.session import SWITCH as SESSION_SWITCH
from createos_sync.emulator import Emulator, Fault
from createos_sync.emulator._service import app as emulator_app

from .ledger import Ledger
from .support import KEY, assert_no_secrets, exception_texts, record_texts

BASE = "https://api.test"
API = f"{BASE}/v1"
SB = f"{API}/sandboxes/sb-1"
PROC = f"{SB}/processes/p-1"
QUERY = "QUERY-MARKER-5d1e"
REMOTE = f"/workspace/{QUERY}.txt"
BODY = "BODY-MARKER-0b7c"
HEADER = "HEADER-MARKER-a3f9"
SECRETS = (KEY, QUERY, HEADER, "grace_ms=", "after=0", "X-Api-Key")
# The message of a 5xx (and every body's other fields) never shows; a 4xx's shows, scrubbed.
SERVER_TEXT = (BODY, "echoed the request")
STATUSES = (400, 401, 403, 404, 408, 409, 410, 413, 422, 429, 500, 502, 503, 504)


def echoing(status: int) -> dict[str, Any]:
    """An error answer that echoes everything, as real ones may."""
    body = {
        "status": "error" if status >= 500 else "fail",
        "data": {"headers": {"X-Api-Key": KEY}, "query": f"?path={REMOTE}&grace_ms=1000"},
        "message": f"{BODY}: echoed the request with key {KEY} and query ?after=0",
        "code": status,
    }
    headers = {"X-Echo-Api-Key": KEY, "X-Debug": HEADER, "Retry-After": "0"}
    return {"status": status, "json": body, "headers": headers}


def ok(data: Any, status: int = 200) -> dict[str, Any]:
    return {"status": status, "json": {"status": "success", "data": data}}


RUNNING = {"id": "sb-1", "status": "running", "name": "n"}
PROCESS = {"process_id": "p-1", "state": "running"}
GONE = {"process_id": "p-1", "state": "exited", "tree_exited": True}


# One driver per operation: the answers that lead to it, the failing request, what runs.
Answers = list[tuple[str, str, dict[str, Any]]]


# The drivers' leases have no ttl watchdog: each scripted answer is meant for the
# operation named, and the watchdog's own requests would take them first.


def _lease(client: cs.Client) -> None:
    client.lease(ttl=None).open().close()


def _run(client: cs.Client) -> None:
    with client.lease(ttl=None) as box:
        box.run("echo hi")


def _upload(client: cs.Client) -> None:
    with client.lease(ttl=None) as box:
        box.write_file(REMOTE, b"data")


def _download(client: cs.Client) -> None:
    with client.lease(ttl=None) as box:
        box.read_file(REMOTE)


DRIVERS: dict[str, tuple[Callable[[int], Answers], Callable[[cs.Client], None]]] = {
    "sandbox creation": (
        lambda s: [("POST", f"{API}/sandboxes", echoing(s)), ("GET", f"{API}/sandboxes", ok([]))],
        _lease,
    ),
    "status poll": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok({**RUNNING, "status": "creating"}, 201)),
            ("GET", SB, echoing(s)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _lease,
    ),
    "sandbox destroy": (
        lambda s: [("POST", f"{API}/sandboxes", ok(RUNNING, 201)), ("DELETE", SB, echoing(s))],
        _lease,
    ),
    "process creation": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("POST", f"{SB}/processes", echoing(s)),
            ("GET", SB, ok(RUNNING)),  # after a 409: is the sandbox still serving?
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _run,
    ),
    "output connection": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("POST", f"{SB}/processes", ok(PROCESS, 201)),
            ("GET", f"{PROC}/connect", echoing(s)),
            ("GET", SB, ok(RUNNING)),  # after a 404 or 409: is the sandbox still serving?
            ("GET", PROC, ok(GONE)),  # after a 410: where does the journal start now?
            ("DELETE", PROC, ok(GONE)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _run,
    ),
    "start-gate release": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("POST", f"{SB}/processes", ok(PROCESS, 201)),
            ("GET", f"{PROC}/connect", {"status": 200, "body": b'{"type": "heartbeat"}\n'}),
            ("POST", f"{PROC}/stdin/close", echoing(s)),
            ("GET", SB, ok(RUNNING)),  # a stream that ends without the exit: sandbox alive?
            ("GET", f"{PROC}/wait", ok({**GONE, "exit_code": 0})),  # it kept ending: wait
            ("DELETE", PROC, ok(GONE)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _run,
    ),
    "process termination": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("POST", f"{SB}/processes", ok(PROCESS, 201)),
            ("GET", f"{PROC}/connect", echoing(410)),  # evicted: the run stops its process
            ("DELETE", PROC, echoing(s)),
            ("GET", PROC, echoing(s)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _run,
    ),
    "file upload": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("PUT", f"{SB}/files", echoing(s)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _upload,
    ),
    "file download": (
        lambda s: [
            ("POST", f"{API}/sandboxes", ok(RUNNING, 201)),
            ("GET", f"{SB}/files", echoing(s)),
            ("DELETE", SB, ok({"id": "sb-1"})),
        ],
        _download,
    ),
    "catalog": (lambda s: [("GET", f"{API}/shapes", echoing(s))], lambda c: c.shapes() and None),
    "listing": (
        lambda s: [("GET", f"{API}/sandboxes", echoing(s))],
        lambda c: c.sandboxes() and None,
    ),
}


@pytest.fixture
def texts(caplog: pytest.LogCaptureFixture) -> Iterator[list[str]]:
    caplog.set_level(logging.DEBUG)
    collected: list[str] = []
    yield collected
    collected += record_texts(caplog.records) + record_texts(caplog.records, ours=False)
    assert_no_secrets(collected, SECRETS)


@pytest.mark.parametrize("operation", sorted(DRIVERS))
def test_error_bodies_headers_and_queries_echoing_the_key_never_show(
    operation: str, texts: list[str], ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    if operation == "start-gate release":  # a managed process's: the command session has none
        monkeypatch.setenv(SESSION_SWITCH, "0")
    answers, drive = DRIVERS[operation]
    failures = 0
    server_errors: list[str] = []
    for status in STATUSES:
        with (
            responses.RequestsMock(assert_all_requests_are_fired=False) as mock,
            cs.Client(KEY, BASE, requests_per_minute=10**9, sleep=lambda s: None) as client,
        ):
            for method, url, answer in answers(status):
                mock.add(method, url, **answer)
            try:
                drive(client)
            except Exception as exc:
                failures += 1
                shown = exception_texts(exc)
                if isinstance(exc, cs.RemoteFileNotFoundError):
                    # It names the path the caller asked for, by design (FileNotFoundError's
                    # filename); anywhere else (a URL's ?path=...) the marker must not show.
                    assert exc.filename == REMOTE
                    shown = [text.replace(REMOTE, "<the remote path>") for text in shown]
                elif f"refused to write {REMOTE}: " in str(exc):
                    # A refused write names the path given, by design, and says why.
                    shown = [
                        text.replace(f"refused to write {REMOTE}: ", "refused to write <it>: ")
                        for text in shown
                    ]
                texts.extend(shown)
                if status >= 500:
                    server_errors.extend(shown)
                if isinstance(exc, cs.CreateosApiError):
                    assert exc.operation in vars(cs.errors.Operation).values()
                    _check_shown_message(exc)
            texts.append(repr(client))
            # The echoing answer really was served (not a connection refused by the mock).
            answered = [c.response.status_code for c in mock.calls if c.response is not None]
            assert status in answered, (status, answered)
            assert all(c.request.headers.get("X-Api-Key") == KEY for c in mock.calls)
    assert failures >= len(STATUSES) - 3  # a few statuses are answers, not failures (404...)
    assert_no_secrets(server_errors, SERVER_TEXT)
    ledger.add(scenarios=len(STATUSES))


def _check_shown_message(exc: cs.CreateosApiError) -> None:
    """A 4xx shows the service's message, scrubbed (401 and 402 their own plain text)."""
    status = exc.status or 0
    if status >= 500 or status < 400:
        assert exc.server_message is None
        return
    if exc.server_message is None:  # withheld: the request sent a file's contents
        assert exc.operation == cs.errors.Operation.FILE_TRANSFER
        return
    assert exc.server_message == (
        f"{BODY}: echoed the request with key [redacted] and query [redacted]"
    )
    if status not in (401, 402):
        assert str(exc).endswith(exc.server_message)


ENV_SECRET = "env-secret-value-41c9"


@pytest.mark.parametrize("status", [400, 401, 402, 403, 409, 422])
def test_a_4xx_echoing_the_callers_env_values_shows_none_of_them(
    status: int, texts: list[str], ledger: Ledger
) -> None:
    """Values the caller sent (env values at creation) are scrubbed from the message the
    service wrote, in every form an echo takes, and the key with them."""
    echo = {
        "status": "fail",
        "data": {"envs": {"API_TOKEN": ENV_SECRET}},
        "message": f'envs.API_TOKEN={ENV_SECRET} refused ("{ENV_SECRET}", key {KEY})',
    }
    with (
        responses.RequestsMock() as mock,
        cs.Client(KEY, BASE, requests_per_minute=10**9, sleep=lambda s: None) as client,
    ):
        mock.add("POST", f"{API}/sandboxes", status=status, json=echo)
        with pytest.raises(cs.CreateosApiError) as caught:
            client.lease(env={"API_TOKEN": ENV_SECRET, "MODE": "fast"}).open()
    texts.extend(exception_texts(caught.value))
    assert_no_secrets(exception_texts(caught.value), (ENV_SECRET, KEY))
    assert caught.value.server_message == (
        'envs.API_TOKEN=[redacted] refused ("[redacted]", key [redacted])'
    )
    ledger.add(scenarios=1)


def test_the_key_is_in_no_repr_of_configuration_client_or_lease() -> None:
    client = cs.Client(KEY, BASE)
    for thing in (client, client.config, client._transport, client.lease()):
        assert KEY not in repr(thing) and KEY not in str(thing)
    client.close()


# --- the emulator's guards ---------------------------------------------------------------


@pytest.fixture(scope="module")
def guarded() -> Iterator[tuple[Emulator, str, str]]:
    """An emulator with a running sandbox and process, so a wrong key would have effect."""
    with (
        Emulator(rate_limit=None, transition_delay=0, api_key=KEY) as emu,
        emu.client(timeout=30) as client,
        client.lease(ttl=None) as box,
    ):
        process = box.start("sleep 1000")
        assert box.id is not None
        yield emu, box.id, process.id


WRONG_KEYS = {
    "missing": None,
    "empty": "",
    "wrong": "sk-reliability-" + "0" * 24,
    "prefix": KEY[:-1],
    "longer": KEY + "x",
    "case": KEY.upper(),
    "non-ascii": KEY[:-1] + "é",
}


def test_every_endpoint_needs_the_key_and_a_refusal_has_no_effect(
    guarded: tuple[Emulator, str, str],
) -> None:
    emu, sandbox_id, process_id = guarded
    routes = [r for r in emulator_app.ROUTES if r[2] not in emulator_app.PUBLIC]
    assert len(routes) > 20
    for path, method, operation in routes:
        url = emu.url + path.replace("<sandbox_id>", sandbox_id).replace("<process_id>", process_id)
        if not operation.startswith("admin."):
            emu.faults.add(Fault(operation, status=500))
        for name, key in WRONG_KEYS.items():
            headers = {} if key is None else {"X-Api-Key": key.encode()}
            answer = requests.request(method, url, headers=headers, data=b"{}", timeout=30)
            assert answer.status_code == 401, (method, path, name)
            assert answer.json() == {
                "status": "fail",
                "data": "missing or invalid API key",  # the reason in data too (the service's)
                "message": "missing or invalid API key",
                "code": 401,
            }
        # Refused before anything else: the pending fault was not even consumed.
        assert [f.operation for f in emu.faults.pending()] == (
            [] if operation.startswith("admin.") else [operation]
        )
        emu.faults.clear()
    assert emu.live_sandboxes() == [sandbox_id]  # nothing created, nothing destroyed
    assert [p.process_id for p in emu.live_processes()] == [process_id]


def test_the_key_is_compared_in_constant_time() -> None:
    source = inspect.getsource(emulator_app)
    authorized = inspect.getsource(emulator_app.App._authorize)
    assert "hmac.compare_digest(" in authorized
    # A sandbox's access token: its digest, compared in constant time too.
    tokens = inspect.getsource(emulator_app.AccessStore.sandbox_of)
    assert "hmac.compare_digest(" in tokens
    # And nowhere compared with == or != (which stops at the first differing byte).
    assert not re.search(r"(==|!=)\s*self\._key|self\._key\s*(==|!=)", source)


def _outward_address() -> str | None:
    """An address of this machine that is not loopback (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: only picks the outgoing interface
        except OSError:
            return None
        address: str = probe.getsockname()[0]
    return None if address.startswith("127.") or address == "0.0.0.0" else address


def test_the_emulator_listens_on_loopback_only(guarded: tuple[Emulator, str, str]) -> None:
    emu = guarded[0]
    host, port = emu.url.removeprefix("http://").rsplit(":", 1)
    assert host == "127.0.0.1"
    for public in ("0.0.0.0", "::", "192.0.2.1", "example.com"):
        with pytest.raises(ValueError, match="loopback"):
            Emulator(host=public)
    outward = _outward_address()
    if outward is None:
        pytest.skip("this machine has no address but loopback to try from")
    with pytest.raises(OSError), socket.create_connection((outward, int(port)), timeout=5):
        pass


def test_admin_fault_bodies_are_never_logged_with_the_key(
    guarded: tuple[Emulator, str, str], caplog: pytest.LogCaptureFixture
) -> None:
    """The admin endpoint takes faults from other processes: the key it needs, and the
    bodies it is given, stay out of the request log and the emulator's log."""
    emu = guarded[0]
    caplog.set_level(logging.DEBUG)
    fault = {"operation": "shapes", "body_base64": base64.b64encode(KEY.encode()).decode()}
    added = requests.post(
        emu.url + "/_emulator/faults",
        headers={"X-Api-Key": KEY},
        data=json.dumps(fault),
        timeout=30,
    )
    assert added.status_code == 201
    requests.delete(emu.url + "/_emulator/faults", headers={"X-Api-Key": KEY}, timeout=30)
    assert KEY not in repr(emu.request_log)
    assert_no_secrets(record_texts(caplog.records) + record_texts(caplog.records, ours=False),
                      (KEY,))  # fmt: skip


def every_linked_exception(exc: BaseException) -> list[BaseException]:
    """``exc`` and every cause and context behind it, printed by Python or not."""
    found: list[BaseException] = []
    pending: list[BaseException | None] = [exc]
    while pending:
        current = pending.pop()
        if current is None or any(current is f for f in found):
            continue
        found.append(current)
        pending += [current.__cause__, current.__context__]
    return found


def test_no_query_string_rides_along_in_a_hidden_exception_context() -> None:
    """``raise ... from None`` hides the transport's exception from printed tracebacks, yet
    inside an ``except`` block it stays reachable as ``__context__`` for any tool that walks
    the chain, and a requests exception's message names the URL, query string included."""
    with (
        cs.Client(KEY, "http://127.0.0.1:9", sleep=lambda s: None, max_retries=0) as client,
        pytest.raises(cs.CreateosApiError) as caught,
    ):
        client.sandboxes()  # nothing listens on port 9; the listing's query: limit, offset
    assert caught.value.status is None
    for linked in every_linked_exception(caught.value):
        assert "offset=" not in str(linked) and KEY not in str(linked), repr(linked)
