"""The official client (``createos-sandbox``), unchanged, forks and builds templates here.

It is the best witness of the service's wire format: if its fork, template
and build-log calls work against the emulator, the emulator speaks them as
the service does.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

createos = pytest.importorskip("createos")

DOCKERFILE = """\
FROM ubuntu:24.04
ENV STAGE=built
RUN echo first > /workspace/first.txt
RUN echo second > /workspace/second.txt && echo done building
"""


EVENT_FIELDS = {"ts", "level", "line", "attempt", "final", "status"}


def _payloads(events: object) -> Iterator[dict[str, object]]:
    """The stream's events as the official NDJSON reader parses them.

    In 0.1.3 its ``TemplateLogEvent.from_dict`` raises TypeError on any
    event (a zero-argument ``super()`` in a ``slots=True`` dataclass), so
    iterating the stream fails whatever the server sends: the events are
    taken one step earlier, from the same reader.
    """
    while True:
        try:
            yield events._next_payload()  # type: ignore[attr-defined]
        except StopIteration:
            return


def _shell(sandbox: object, script: str) -> str:
    response = sandbox.shell(script)  # type: ignore[attr-defined]
    return str(response.result.standard_output)


def test_official_client_forks_a_running_and_a_paused_sandbox(official: object) -> None:
    request = createos.CreateSandboxRequest(shape="s-1vcpu-1gb")
    source = official.create_sandbox(request).wait_until_running()  # type: ignore[attr-defined]
    _shell(source, "echo kept > /workspace/kept.txt")

    fork = source.fork().wait_until_running()
    assert fork.id != source.id and fork.data.forked_from == source.id
    assert _shell(fork, "cat /workspace/kept.txt") == "kept\n"

    source.pause()
    source.wait_until_paused()
    paused_fork = source.fork(createos.ForkSandboxRequest(start_paused=True))
    paused_fork.wait_until_paused()
    assert source.refresh().status == "paused"  # the source is untouched
    paused_fork.resume()
    paused_fork.wait_until_running()
    assert _shell(paused_fork, "cat /workspace/kept.txt") == "kept\n"
    for sandbox in (fork, paused_fork, source):
        sandbox.destroy()


def test_official_client_builds_a_template_and_follows_its_log(official: object) -> None:
    templates = official.templates  # type: ignore[attr-defined]
    submitted = templates.create(createos.TemplateCreateRequest(name="demo", dockerfile=DOCKERFILE))
    assert submitted.status in ("pending", "building")

    with templates.follow_logs(submitted.id) as events:
        received = list(_payloads(events))
    assert received[-1]["final"] is True and received[-1]["status"] == "ready"
    assert "done building" in [event["line"] for event in received]
    assert all(set(event) == EVENT_FIELDS and event["attempt"] == 1 for event in received)
    assert "done building" in templates.logs(submitted.id)

    built = templates.get(submitted.id, createos.GetTemplateOptions(include="dockerfile"))
    assert (built.status, built.dockerfile, built.base) == ("ready", DOCKERFILE, "ubuntu-24.04")
    assert built.built_at is not None
    assert [t.id for t in templates.list()] == [submitted.id]

    request = createos.CreateSandboxRequest(shape="s-1vcpu-1gb", rootfs=submitted.id)
    sandbox = official.create_sandbox(request).wait_until_running()  # type: ignore[attr-defined]
    script = "cat /workspace/first.txt /workspace/second.txt; echo $STAGE"
    assert _shell(sandbox, script) == "first\nsecond\nbuilt\n"
    sandbox.destroy()
    templates.delete(submitted.id)
    assert templates.list() == []
