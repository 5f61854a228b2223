"""Templates end to end: real builds on the emulator, leases on them, failures, dropped logs."""

from __future__ import annotations

from typing import Any

import pytest
import requests

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator, Fault
from createos_sync.emulator._state import bases

from .helpers import operations

TWO_STEPS = """\
FROM ubuntu:24.04
ENV GREETING="hello from the template"
WORKDIR /workspace/app
RUN echo one > step1.txt{outside}
RUN echo two > step2.txt && echo "built in $(pwd)"
"""
# Only with the writable layer: a plain-mode step would write the host's /opt.
OUTSIDE = " && mkdir -p /opt/tpl && echo outside > /opt/tpl/step1.txt"


def _layered(emulator: Emulator) -> bool:
    return getattr(emulator._require_store().isolation, "overlays", None) is not None


def _log_text(emulator: Emulator, template_id: str) -> str:
    answer = requests.get(
        f"{emulator.url}/v1/templates/{template_id}/logs",
        headers={"X-Api-Key": emulator.api_key},
        timeout=30,
    )
    answer.raise_for_status()
    return answer.text


def test_a_lease_on_a_two_step_template_sees_both_steps_and_its_env(
    emulator: Emulator, client: Client
) -> None:
    lines: list[str] = []
    emulator.clear_request_log()
    layered = _layered(emulator)
    dockerfile = TWO_STEPS.format(outside=OUTSIDE if layered else "")
    template = client.build_template("two-steps", dockerfile, on_log=lines.append)

    assert (template.status, template.name, template.base) == ("ready", "two-steps", "ubuntu-24.04")
    assert template.built_at is not None and template.ready
    assert [op for op, _ in operations(emulator)] == [
        "template.create", "template.logs", "template.get"
    ]  # the request budget  # fmt: skip
    # In plain mode `pwd` shows where the sandbox's /workspace lives on the host.
    assert any(line.startswith("built in ") and line.endswith("/workspace/app") for line in lines)
    with client.lease(rootfs=template.id) as box:
        result = box.run("pwd; cat step1.txt step2.txt; echo $GREETING", check=True)
        assert result.stdout.endswith("/workspace/app\none\ntwo\nhello from the template\n")
        if layered:  # a file written outside /workspace, kept in the layer
            assert result.stdout.startswith("/workspace/app\n")
            assert box.run("cat /opt/tpl/step1.txt").stdout == "outside\n"
    client.delete_template(template.id)


def test_a_failing_run_raises_template_build_error_with_its_output(client: Client) -> None:
    dockerfile = "FROM ubuntu:24.04\nRUN echo before the failure && ls /no/such/dir\n"
    with pytest.raises(cs.TemplateBuildError) as caught:
        client.build_template("failing", dockerfile)
    message = str(caught.value)
    assert "before the failure" in message
    assert "/no/such/dir" in message and "exit code 2" in message
    assert message.splitlines()[-1].startswith("  | ")  # the log's tail ends the message
    assert client.template(caught.value.template_id).status == "failed"
    client.delete_template(caught.value.template_id)


def test_an_instruction_the_emulator_cannot_honour_fails_clearly(client: Client) -> None:
    with pytest.raises(cs.TemplateBuildError, match="COPY needs a build context"):
        client.build_template("copying", "FROM ubuntu:24.04\nCOPY . /app\n")
    with pytest.raises(cs.TemplateBuildError, match="multi-stage builds are not supported"):
        client.build_template("stages", "FROM ubuntu:24.04 AS a\nFROM ubuntu:24.04\n")


def test_a_dropped_log_stream_is_reconnected_without_repeating_a_line(
    emulator: Emulator, client: Client
) -> None:
    dockerfile = "FROM ubuntu:24.04\nRUN for i in $(seq 1 40); do echo line $i; done\n"
    emulator.faults.add(Fault("template.logs", drop_after_frames=5, times=2))
    emulator.clear_request_log()
    lines: list[str] = []

    template = client.build_template("dropped", dockerfile, on_log=lines.append)

    assert [s for op, s in operations(emulator) if op == "template.logs"] == [200, 200, 200]
    assert lines == _log_text(emulator, template.id).splitlines()
    assert [line for line in lines if line.startswith("line ")] == [
        f"line {i}" for i in range(1, 41)
    ]
    client.delete_template(template.id)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        (
            {"name": "", "dockerfile": "FROM ubuntu:24.04\n"},
            ValueError,
            r"name must be 1\.\.128 printable characters",
        ),
        (
            {"name": "  ", "dockerfile": "FROM ubuntu:24.04\n"},
            ValueError,
            r"name must be 1\.\.128 printable characters",
        ),
        (
            {"name": "x\n", "dockerfile": "FROM ubuntu:24.04\n"},
            ValueError,
            r"name must be 1\.\.128 printable characters",
        ),
        (
            {"name": "x", "dockerfile": b"FROM ubuntu:24.04\n"},
            TypeError,
            r"dockerfile must be the Dockerfile's text \(a str\)",
        ),
        (
            {"name": "x", "dockerfile": ""},
            ValueError,
            "dockerfile must be non-empty text without NUL",
        ),
        (
            {"name": "x", "dockerfile": "FROM x\n", "base": ""},
            ValueError,
            "base must be a non-empty str or None",
        ),
        (
            {"name": "x", "dockerfile": "FROM x\n", "on_log": "print"},
            TypeError,
            "on_log must be callable",
        ),
        (
            {"name": "x", "dockerfile": "FROM x\n", "timeout": 0},
            ValueError,
            "timeout must be a positive, finite number of seconds",
        ),
        ({"name": 3, "dockerfile": "FROM x\n"}, TypeError, "name must be a str"),
    ],
)
def test_invalid_build_arguments_raise_before_any_request(
    emulator: Emulator,
    client: Client,
    arguments: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    emulator.clear_request_log()
    with pytest.raises(error, match=message):
        client.build_template(**arguments)
    assert emulator.request_log == []


def test_listing_reading_and_deleting_templates(emulator: Emulator, client: Client) -> None:
    template = client.build_template("listed", "FROM ubuntu:24.04\nRUN true\n")
    emulator.clear_request_log()
    assert template.id in [t.id for t in client.templates()]
    assert client.template(template.id) == template
    client.delete_template(template.id)
    client.delete_template(template.id)  # already gone: fine
    assert template.id not in [t.id for t in client.templates()]
    assert [op for op, _ in operations(emulator)] == [
        "template.list", "template.get", "template.delete", "template.delete", "template.list"
    ]  # one request each  # fmt: skip
    with pytest.raises(ValueError, match="template_id must be a non-empty str"):
        client.template("")


def test_a_base_whose_promise_this_machine_cannot_keep_is_refused_naming_those_it_can(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The emulator builds on this machine's system: FROM python-3.12 must not run a 3.11.
    monkeypatch.setattr(bases, "version", lambda program: "Python 3.11.2")
    with pytest.raises(cs.TemplateBuildError) as caught:
        client.build_template("py", "FROM python-3.12\nRUN python3 --version\n")
    message = str(caught.value)
    assert "python-3.12 promises Python 3.12" in message and "python3 is Python 3.11.2" in message
    assert "the bases it can honour here are ubuntu-24.04, ubuntu-22.04" in message
    client.delete_template(caught.value.template_id)
    monkeypatch.setattr(bases, "version", lambda program: "Python 3.12.3")
    template = client.build_template("py", "FROM python-3.12\nRUN true\n")
    assert template.base == "python-3.12"
    client.delete_template(template.id)
