"""The network surface over the wire: egress, ingress, preview URLs, ports, auto-pause."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.models import SandboxInfo

from .wire import KEY, SANDBOX, Service, sandbox

TEMPLATE = "https://<port>-sb-1.sb.createos.sh/"
EXEC = f"/sandboxes/{SANDBOX}/exec"
EGRESS = f"/sandboxes/{SANDBOX}/egress"


def ingress_on(**extra: Any) -> dict[str, Any]:
    return sandbox(ingress_enabled=True, ingress_url_template=TEMPLATE, **extra)


@pytest.fixture
def box_sandbox() -> dict[str, Any]:
    return sandbox(ingress_enabled=False, ingress_url_template=TEMPLATE)


def sent(service: Service, method: str, path: str = "") -> list[Any]:
    return [
        json.loads(c.request.body) if c.request.body else None
        for c in service.calls(method)
        if c.request.url.split("?")[0].endswith(path)
    ]


def probe_exit(service: Service, code: int | None) -> None:
    service.add("POST", EXEC, body={"result": {"exit_code": code, "stdout": "", "stderr": ""}})


# --- egress -------------------------------------------------------------------


def test_egress_reads_the_rules(box: cs.Lease, service: Service) -> None:
    service.add("GET", EGRESS, body={"egress": ["pypi.org", "*.github.com", "10.0.0.0/8"]})
    assert box.egress() == ["pypi.org", "*.github.com", "10.0.0.0/8"]
    assert len(service.calls("GET", "/egress")) == 1


def test_no_egress_rules_read_as_allow_all(box: cs.Lease, service: Service) -> None:
    service.add("GET", EGRESS, body={"egress": None})
    assert box.egress() == []


def test_implausible_rules_are_not_shown(box: cs.Lease, service: Service) -> None:
    hostile = f"<script>{KEY}</script>"
    service.add("GET", EGRESS, body={"egress": ["pypi.org", hostile, 7, "a b"]})
    assert box.egress() == ["pypi.org", "(unrecognised)", "(unrecognised)", "(unrecognised)"]


def test_egress_answer_that_is_not_a_list_is_a_protocol_error(
    box: cs.Lease, service: Service
) -> None:
    service.add("GET", EGRESS, body={"egress": "everything"})
    with pytest.raises(cs.ProtocolError, match="the egress rules in the answer are not a list"):
        box.egress()


def test_set_egress_sends_the_rules_and_returns_the_answer(box: cs.Lease, service: Service) -> None:
    service.add("PUT", EGRESS, body={"egress": ["pypi.org"]})
    assert box.set_egress(("pypi.org",)) == ["pypi.org"]
    assert sent(service, "PUT", "/egress") == [{"egress": ["pypi.org"]}]


def test_set_egress_none_allows_all(box: cs.Lease, service: Service) -> None:
    service.add("PUT", EGRESS, body={"egress": []})
    assert box.set_egress(None) == []
    assert sent(service, "PUT", "/egress") == [{"egress": []}]


def test_set_egress_is_repeated_after_a_lost_answer(box: cs.Lease, service: Service) -> None:
    service.add("PUT", EGRESS, 502)
    service.add("PUT", EGRESS, body={"egress": ["pypi.org"]})
    assert box.set_egress(["pypi.org"]) == ["pypi.org"]
    assert len(service.calls("PUT")) == 2


@pytest.mark.parametrize(
    ("rules", "message"),
    [
        ("pypi.org", "egress must be a sequence of rule strings"),
        ({"pypi.org": True}, "egress must be a sequence of rule strings"),
        ([{"host": "pypi.org"}], "every egress rule must be a non-empty str"),
        ([""], "every egress rule must be a non-empty str"),
        (["pypi .org"], "an egress rule must not contain spaces or control characters"),
        ([3], "every egress rule must be a non-empty str"),
    ],
)
def test_bad_egress_rules_fail_before_any_request(
    box: cs.Lease, service: Service, rules: Any, message: str
) -> None:
    before = len(service.mock.calls)
    with pytest.raises(ValueError, match=message):
        box.set_egress(rules)
    assert len(service.mock.calls) == before


# --- ingress and preview URLs ------------------------------------------------


def test_set_ingress_patches_and_makes_preview_urls_available(
    box: cs.Lease, service: Service
) -> None:
    with pytest.raises(ValueError, match="ingress is off"):
        box.preview_url(8000)
    service.add("PATCH", f"/sandboxes/{SANDBOX}", body=ingress_on())
    info = box.set_ingress(True)
    assert info.ingress_enabled is True and info.ingress_url_template == TEMPLATE
    assert sent(service, "PATCH") == [{"ingress_enabled": True}]
    before = len(service.mock.calls)
    assert box.preview_url(8000) == "https://8000-sb-1.sb.createos.sh/"
    assert box.preview_url(1) == "https://1-sb-1.sb.createos.sh/"
    assert len(service.mock.calls) == before  # no request: the template came with the record


def test_set_ingress_off(box: cs.Lease, service: Service) -> None:
    service.add("PATCH", f"/sandboxes/{SANDBOX}", body=ingress_on())
    service.add("PATCH", f"/sandboxes/{SANDBOX}", body=sandbox(ingress_enabled=False))
    box.set_ingress(True)
    box.set_ingress(False)
    assert sent(service, "PATCH") == [{"ingress_enabled": True}, {"ingress_enabled": False}]
    with pytest.raises(ValueError, match="ingress is off"):
        box.preview_url(8000)


@pytest.mark.parametrize("enabled", [1, "yes", None])
def test_set_ingress_needs_a_bool(box: cs.Lease, service: Service, enabled: Any) -> None:
    before = len(service.mock.calls)
    with pytest.raises(TypeError, match="enabled must be True or False"):
        box.set_ingress(enabled)
    assert len(service.mock.calls) == before


def test_lease_with_ingress_sends_it_and_keeps_the_template(
    client: Client, service: Service
) -> None:
    service.create_sandbox(body=ingress_on())
    service.watchdog()
    service.destroy_sandbox()
    with client.lease(ingress=True) as box:
        assert box.preview_url(3000) == "https://3000-sb-1.sb.createos.sh/"
    [body] = sent(service, "POST", "/sandboxes")
    assert body["ingress_enabled"] is True


@pytest.mark.parametrize(
    ("port", "error", "message"),
    [(0, ValueError, r"port must be in 1\.\.65535, not 0"),
     (65536, ValueError, r"port must be in 1\.\.65535, not 65536"),
     (-1, ValueError, r"port must be in 1\.\.65535, not -1"),
     (True, TypeError, "port must be an int"),
     ("80", TypeError, "port must be an int"),
     (80.0, TypeError, "port must be an int"),
     (None, TypeError, "port must be an int")],
)  # fmt: skip
def test_bad_ports_are_refused(
    client: Client, service: Service, port: Any, error: type[Exception], message: str
) -> None:
    service.create_sandbox(body=ingress_on())
    service.watchdog()
    service.destroy_sandbox()
    with client.lease(ingress=True) as box:
        with pytest.raises(error, match=message):
            box.preview_url(port)
        with pytest.raises(error, match=message):
            box.wait_for_port(port)
    assert len(service.mock.calls) == 3  # creation, the ttl watchdog, destroy


@pytest.mark.parametrize(
    "template",
    [
        "http://preview.example.com/<port>/",  # plain HTTP off loopback
        "http://<port>-sb-1.localhost.example.com/",  # not a name under localhost
        "http://<port>-sb-1.notlocalhost/",
        "https://user:pw@preview.example.com/<port>/",  # user information
        "javascript:alert(1)//<port>",
        "file:///etc/<port>",
        "https:///<port>",  # no host
        "https://preview.example.com:99999<port>/",  # not a port
        "https://preview.example.com/",  # no placeholder
        f"https://preview.example.com/<port>/ {KEY}",  # not URL characters
        "https://preview.example.com/<port>/\n",
        ["https://preview.example.com/<port>/"],
    ],
)
def test_unsafe_templates_never_become_urls(
    client: Client, service: Service, template: Any
) -> None:
    service.create_sandbox(body=sandbox(ingress_enabled=True, ingress_url_template=template))
    service.watchdog()
    service.destroy_sandbox()
    with client.lease(ingress=True) as box:
        with pytest.raises(cs.ProtocolError, match="ingress URL template") as caught:
            box.preview_url(8000)
        assert "preview.example.com" not in str(caught.value) and KEY not in str(caught.value)


@pytest.mark.parametrize(
    ("template", "url"),
    [
        ("http://127.0.0.1:4321/_ingress/sb-1/<port>/", "http://127.0.0.1:4321/_ingress/sb-1/80/"),
        ("http://localhost/p/<port>", "http://localhost/p/80"),
        ("http://[::1]:9/<port>/", "http://[::1]:9/80/"),
        # The emulator's origin per sandbox port: names under localhost stay on loopback.
        ("http://<port>-sb-1.localhost:4321/", "http://80-sb-1.localhost:4321/"),
        ("https://sb-1.example.com:<port>/", "https://sb-1.example.com:80/"),
    ],
)
def test_plausible_templates(client: Client, service: Service, template: str, url: str) -> None:
    service.create_sandbox(body=sandbox(ingress_enabled=True, ingress_url_template=template))
    service.watchdog()
    service.destroy_sandbox()
    with client.lease(ingress=True) as box:
        assert box.preview_url(80) == url


def test_sandbox_info_keeps_the_network_fields_and_tolerates_extras() -> None:
    info = SandboxInfo.from_api(
        ingress_on(egress=["pypi.org", None], auto_pause_after_seconds=300, new_field={"x": 1})
    )
    assert info.ingress_enabled is True and info.ingress_url_template == TEMPLATE
    assert info.egress == ("pypi.org", "(unrecognised)")
    assert info.auto_pause_after == 300
    bare = SandboxInfo.from_api({"id": "sb-2", "status": "running", "ingress_url_template": ""})
    assert (bare.ingress_enabled, bare.ingress_url_template, bare.egress) == (None, None, None)
    hostile = SandboxInfo.from_api(sandbox(ingress_url_template=f"https://{KEY} x/<port>"))
    assert hostile.ingress_url_template == "(unrecognised)" and KEY not in repr(hostile)


# --- wait_for_port --------------------------------------------------------------


def test_wait_for_port_is_one_exec_of_a_probe_loop(box: cs.Lease, service: Service) -> None:
    probe_exit(service, 0)
    box.wait_for_port(8000, timeout=2.5)
    [body] = sent(service, "POST", "/exec")
    assert body["cmd"] == "bash" and body["args"][0] == "-c"
    script = body["args"][1]
    assert script.startswith("timeout 3 bash -c ")  # rounded up to whole seconds
    assert "/dev/tcp/127.0.0.1/8000" in script and "until" in script


def test_wait_for_port_times_out(box: cs.Lease, service: Service) -> None:
    probe_exit(service, 124)
    with pytest.raises(cs.OperationTimeout, match="port 8000") as caught:
        box.wait_for_port(8000, timeout=1)
    assert isinstance(caught.value, TimeoutError)
    assert len(service.calls("POST", "/exec")) == 1


@pytest.mark.parametrize("code", [127, 1, None, "x"])
def test_a_probe_that_cannot_run_is_not_a_timeout(
    box: cs.Lease, service: Service, code: Any
) -> None:
    probe_exit(service, code)
    with pytest.raises(cs.CreateosError, match="could not run") as caught:
        box.wait_for_port(8000)
    assert not isinstance(caught.value, cs.OperationTimeout)


@pytest.mark.parametrize(("timeout", "error", "message"), [
    (0, ValueError, "timeout must be a positive, finite number of seconds"),
    (-1, ValueError, "timeout must be a positive, finite number of seconds"),
    (float("inf"), ValueError, "timeout must be a positive, finite number of seconds"),
    ("5", TypeError, "timeout must be a number of seconds"),
    (None, TypeError, "timeout must be a number of seconds"),
])  # fmt: skip
def test_bad_wait_timeouts_fail_before_any_request(
    box: cs.Lease, service: Service, timeout: Any, error: type[Exception], message: str
) -> None:
    before = len(service.mock.calls)
    with pytest.raises(error, match=message):
        box.wait_for_port(8000, timeout=timeout)
    assert len(service.mock.calls) == before


# --- auto-pause -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("seconds", "body"),
    [(60, {"auto_pause_after_seconds": 60}), (600.0, {"auto_pause_after_seconds": 600}),
     (86400, {"auto_pause_after_seconds": 86400}), (None, {"disable_auto_pause": True})],
)  # fmt: skip
def test_set_auto_pause_patches(
    box: cs.Lease, service: Service, seconds: Any, body: dict[str, Any]
) -> None:
    answer = body.get("auto_pause_after_seconds")
    service.add("PATCH", f"/sandboxes/{SANDBOX}", body=sandbox(auto_pause_after_seconds=answer))
    info = box.set_auto_pause(seconds)
    assert sent(service, "PATCH") == [body]
    assert info.auto_pause_after == answer
    assert isinstance(body.get("auto_pause_after_seconds", 0), int)


@pytest.mark.parametrize("seconds", [59, 86401, 60.5, True, "60", 0, -60])
def test_bad_auto_pause_fails_before_any_request(
    box: cs.Lease, service: Service, seconds: Any
) -> None:
    before = len(service.mock.calls)
    with pytest.raises(ValueError, match=r"auto-pause must be whole seconds in 60\.\.86400"):
        box.set_auto_pause(seconds)
    assert len(service.mock.calls) == before


# --- request budgets: what each docstring says is what goes out -------------------

BUDGETS: dict[str, tuple[Callable[[Service], None], Callable[[cs.Lease], Any]]] = {
    "egress": (lambda s: s.add("GET", EGRESS, body={"egress": []}), lambda b: b.egress()),
    "set_egress": (
        lambda s: s.add("PUT", EGRESS, body={"egress": ["a.b"]}),
        lambda b: b.set_egress(["a.b"]),
    ),
    "set_ingress": (
        lambda s: s.add("PATCH", f"/sandboxes/{SANDBOX}", body=ingress_on()),
        lambda b: b.set_ingress(True),
    ),
    "preview_url": (lambda s: None, lambda b: b.preview_url(80)),
    "wait_for_port": (lambda s: probe_exit(s, 0), lambda b: b.wait_for_port(80)),
    "set_auto_pause": (
        lambda s: s.add("PATCH", f"/sandboxes/{SANDBOX}", body=sandbox()),
        lambda b: b.set_auto_pause(60),
    ),
}


def documented_budget(method: str) -> int:
    doc = getattr(cs.Lease, method).__doc__ or ""
    found = re.search(r"Request budget: (none|\d+)", doc)
    assert found, f"Lease.{method} does not document its request budget"
    return 0 if found.group(1) == "none" else int(found.group(1))


@pytest.mark.parametrize("method", sorted(BUDGETS))
def test_request_budget_matches_the_docstring(
    client: Client, service: Service, method: str
) -> None:
    service.create_sandbox(body=ingress_on())
    service.watchdog()
    service.destroy_sandbox()
    script, call = BUDGETS[method]
    script(service)
    with client.lease(ingress=True) as box:
        before = len(service.mock.calls)
        call(box)
        used = len(service.mock.calls) - before
    assert used == documented_budget(method)
