"""The emulator's template builds: the Dockerfile subset, plain mode, the log endpoints."""

from __future__ import annotations

import json

import pytest

from createos_sync import TemplateBuildError
from createos_sync.emulator import Emulator
from createos_sync.emulator._state.dockerfile import DockerfileError, assignments, parse, workdir

from .helpers import Api


def test_continuations_comments_and_forms_are_parsed() -> None:
    steps = parse(
        "# a comment\nARG V=1\nFROM ubuntu:24.04 AS base\n\n"
        'RUN echo a \\\n    && echo b\n# inside\nRUN ["/bin/echo", "x y"]\n'
        'ENV A=1 B="two words"\nENV C three words\nWORKDIR app\n'
    )
    assert [s.keyword for s in steps] == ["ARG", "FROM", "RUN", "RUN", "ENV", "ENV", "WORKDIR"]
    assert steps[2].args == "echo a && echo b" and steps[2].line == 5
    assert assignments(steps[4], {}) == {"A": "1", "B": "two words"}
    assert assignments(steps[5], {}) == {"C": "three words"}
    assert workdir(steps[6], "/workspace", {}) == "/workspace/app"


@pytest.mark.parametrize(
    ("dockerfile", "message"),
    [
        ("FROM a\nCOPY . /app\n", "COPY needs a build context"),
        ("FROM a\nADD x.tgz /\n", "ADD needs a build context"),
        ("FROM a\nFROM b\n", "multi-stage builds are not supported"),
        ("FROM a\nCOPY --from=a /x /y\n", "multi-stage builds are not supported"),
        ("FROM a\nRUN <<EOF\necho\nEOF\n", "heredocs are not supported"),
        ("FROM a\nUSER nobody\n", "USER is not supported"),
        ("RUN true\nFROM a\n", "FROM must come first"),
        ("FROM a\nFROBNICATE x\n", "unknown instruction"),
        ('FROM a\nRUN ["x", 1]\n', "JSON list of str"),
    ],
)
def test_what_cannot_be_honoured_is_refused_with_its_line(dockerfile: str, message: str) -> None:
    with pytest.raises(DockerfileError, match=message) as caught:
        parse(dockerfile)
    assert caught.value.line >= 1


def test_plain_mode_builds_keep_the_storage_trees_and_refuse_other_workdirs(
    make_emu: object,
) -> None:
    emu: Emulator = make_emu(isolation="none")  # type: ignore[operator]
    with emu.client() as client:
        template = client.build_template(
            "plain", "FROM ubuntu:24.04\nWORKDIR /workspace/w\nENV X=1\nRUN echo kept > f\n"
        )
        with client.lease(rootfs=template.id) as box:
            assert box.run("cat f; echo $X").stdout == "kept\n1\n"
        with pytest.raises(TemplateBuildError, match="needs the emulator's writable layer"):
            client.build_template("elsewhere", "FROM ubuntu:24.04\nWORKDIR /srv/app\n")


def test_log_endpoints_and_unknown_bases(api: Api) -> None:
    bad = api.data("POST", "/v1/templates", json={"name": "b", "dockerfile": "FROM nothing:1\n"})
    followed = api.call("GET", f"/v1/templates/{bad['id']}/logs", params={"follow": "true"})
    assert followed.headers["Content-Type"].startswith("application/x-ndjson")
    events = [json.loads(line) for line in followed.text.splitlines() if line.strip()]
    assert events[-1]["final"] is True and events[-1]["status"] == "failed"
    assert (
        "unknown base image 'nothing:1'" in api.call("GET", f"/v1/templates/{bad['id']}/logs").text
    )
    assert (
        api.call("POST", "/v1/templates", json={"name": "", "dockerfile": "x"}).status_code == 400
    )
    assert (
        api.call(
            "POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb", "rootfs": bad["id"]}
        ).status_code
        == 400
    )
