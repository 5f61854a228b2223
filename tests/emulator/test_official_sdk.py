"""The official ``createos-sandbox`` client, unchanged, against the emulator.

The official SDK is the best witness of the real service's wire behaviour:
if its own flows pass here, the emulator speaks what the service speaks (as
far as that SDK knows it). Where one fails, the emulator is what gets fixed.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import createos
import pytest
import requests
from createos import (
    CreateSandboxRequest,
    ExecOptions,
    ManagedProcessConnectOptions,
    ManagedProcessCreateRequest,
    ManagedProcessWaitOptions,
    ManagedProcessWaitScope,
    PTYSize,
    RunCommandRequest,
    SandboxInstance,
    SandboxStatus,
    WaitOptions,
)

from ..waiting import wait_until

WAIT = WaitOptions(timeout=30.0)


@pytest.fixture
def box(official: createos.Client) -> Iterator[SandboxInstance]:
    request = CreateSandboxRequest(
        shape="s-1vcpu-1gb", ingress_enabled=True, egress_rules=["pypi.org"]
    )
    sandbox = official.create_sandbox(request)
    try:
        sandbox.wait_until_running(WAIT)
        yield sandbox
    finally:
        sandbox.destroy()
        sandbox.wait_until_destroyed(WAIT)


def serve(box: SandboxInstance) -> int:
    """``python3 -m http.server`` on a free port as a managed process; its port."""
    server = ManagedProcessCreateRequest(
        command="bash",
        arguments=["-c", "exec python3 -u -m http.server 0 --bind 127.0.0.1 > server.log 2>&1"],
        working_directory="/workspace",
    )
    box.processes.create(server)

    def port() -> int | None:
        try:
            log = _read(box, "/workspace/server.log")
        except createos.APIError as exc:  # not written yet
            assert exc.status_code == 404
            return None
        found = re.search(rb"port (\d+)", log)
        return int(found.group(1)) if found else None

    found: int = wait_until(port, what="the server's port")
    return found


def _read(box: SandboxInstance, path: str) -> bytes:
    with box.files.download(path) as stream:
        return stream.read()


def test_creation_with_ingress_and_the_sandbox_record(
    official: createos.Client, box: SandboxInstance
) -> None:
    data = box.refresh().data
    assert data.status is SandboxStatus.RUNNING
    assert data.ingress_enabled is True and "<port>" in data.ingress_url_template
    assert data.egress_rules == ["pypi.org"]
    assert data.created_at is not None
    assert official.get_sandbox(box.id).id == box.id
    assert box.id in [s.id for s in official.list_sandboxes()]
    assert "s-1vcpu-1gb" in [s.id for s in official.list_shapes()]


def test_preview_url_and_wait_for_port(box: SandboxInstance) -> None:
    box.files.upload("/workspace/index.html", b"<p>served by the sandbox</p>\n")
    port = serve(box)
    box.wait_for_port(port, timeout=10)
    page = requests.get(box.preview_url(port), timeout=10)
    assert page.status_code == 200 and page.text == "<p>served by the sandbox</p>\n"
    with pytest.raises(createos.OperationTimeout, match="did not become ready"):
        box.wait_for_port(1, timeout=1)


def test_set_ingress(box: SandboxInstance) -> None:
    port = serve(box)
    url = box.preview_url(port)
    box.set_ingress(False)
    assert box.data.ingress_enabled is False
    with pytest.raises(ValueError, match="ingress is not enabled"):
        box.preview_url(port)
    assert requests.get(url, timeout=10).status_code == 403
    box.set_ingress(True)
    assert box.preview_url(port) == url
    box.wait_for_port(port, timeout=10)
    assert requests.get(url, timeout=10).status_code == 200


def test_set_auto_pause(box: SandboxInstance) -> None:
    assert box.set_auto_pause(120).data.auto_pause_after_seconds == 120
    assert box.refresh().data.auto_pause_after_seconds == 120
    assert box.set_auto_pause(None).data.auto_pause_after_seconds is None
    with pytest.raises(ValueError, match="auto-pause timeout must be whole seconds"):
        box.set_auto_pause(30)


def test_egress(box: SandboxInstance) -> None:
    assert box.egress().egress_rules == ["pypi.org"]
    assert box.set_egress(["*.github.com", "10.0.0.0/8"]).egress_rules == [
        "*.github.com",
        "10.0.0.0/8",
    ]
    assert box.egress().egress_rules == ["*.github.com", "10.0.0.0/8"]
    assert box.refresh().data.egress_rules == ["*.github.com", "10.0.0.0/8"]


def test_shell_and_run_command(box: SandboxInstance) -> None:
    assert box.shell("echo hello; echo oops >&2").result.standard_output == "hello\n"
    with pytest.raises(createos.CommandError, match="status 3"):
        box.shell("exit 3")
    echo = RunCommandRequest(
        command="python3", arguments=["-c", "import sys; print(sys.stdin.read())"]
    )
    piped = box.run_command(echo, ExecOptions(standard_input="from stdin"))
    assert piped.result.exit_code == 0 and piped.result.standard_output == "from stdin\n"


def test_files_upload_and_download(box: SandboxInstance) -> None:
    payload = bytes(range(256)) * 1024
    box.files.upload("/workspace/data.bin", payload)
    assert _read(box, "/workspace/data.bin") == payload
    assert box.shell("wc -c < /workspace/data.bin").result.standard_output.strip() == str(
        len(payload)
    )


def test_pause_and_resume(box: SandboxInstance) -> None:
    box.pause()
    box.wait_until_paused(WAIT)
    box.resume()
    box.wait_until_running(WAIT)
    assert box.shell("echo back").result.standard_output == "back\n"


def test_managed_process_connect_input_wait_and_delete(box: SandboxInstance) -> None:
    """The managed-process flow of the production integration: create, connect, input,
    close stdin, long-poll ``/wait`` (408 while it runs), and delete."""
    created = box.processes.create(
        ManagedProcessCreateRequest(
            command="bash", arguments=["-c", "read line; echo got $line; cat >/dev/null"]
        )
    )
    with pytest.raises(createos.APIError) as early:
        box.processes.wait(
            created.process_id,
            ManagedProcessWaitOptions(scope=ManagedProcessWaitScope.TREE, wait_timeout=0.1),
        )
    assert early.value.status_code == 408  # not yet: the caller decides to poll again
    assert box.processes.input(created.process_id, "hello\n") >= 1
    box.processes.close_standard_input(created.process_id)
    done = box.processes.wait(
        created.process_id,
        ManagedProcessWaitOptions(scope=ManagedProcessWaitScope.TREE, wait_timeout=10.0),
    )
    assert (done.exit_code, done.tree_exited) == (0, True)
    with box.processes.connect(created.process_id, ManagedProcessConnectOptions()) as stream:
        events = list(stream)
    output = b"".join(e.data for e in events if e.type.value == "data")
    assert output == b"got hello\n"
    assert events[-1].type.value == "exit" and events[-1].exit_code == 0
    assert [p.process_id for p in box.processes.list()] == [created.process_id]
    gone = box.processes.delete(created.process_id)
    assert gone.tree_exited


def test_terminal_process_and_resize(box: SandboxInstance) -> None:
    created = box.processes.create(
        ManagedProcessCreateRequest(
            command="bash", arguments=["-c", "read _; stty size"], pty=PTYSize(rows=30, cols=100)
        )
    )
    assert created.kind.value == "pty"
    box.processes.resize(created.process_id, PTYSize(rows=40, cols=120))
    box.processes.input(created.process_id, "\n")
    box.processes.wait(created.process_id, ManagedProcessWaitOptions(wait_timeout=10.0))
    with box.processes.connect(created.process_id) as stream:
        text = b"".join(e.data for e in stream if e.type.value == "data").decode()
    assert "40 120" in text
