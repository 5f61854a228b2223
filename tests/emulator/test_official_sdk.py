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
def official_box(official: createos.Client) -> Iterator[SandboxInstance]:
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


def serve(official_box: SandboxInstance) -> int:
    """``python3 -m http.server`` on a free port as a managed process; its port."""
    server = ManagedProcessCreateRequest(
        command="bash",
        arguments=["-c", "exec python3 -u -m http.server 0 --bind 127.0.0.1 > server.log 2>&1"],
        working_directory="/workspace",
    )
    official_box.processes.create(server)

    def port() -> int | None:
        try:
            log = _read(official_box, "/workspace/server.log")
        except createos.APIError as exc:  # not written yet
            assert exc.status_code == 404
            return None
        found = re.search(rb"port (\d+)", log)
        return int(found.group(1)) if found else None

    found: int = wait_until(port, what="the server's port")
    return found


def _read(official_box: SandboxInstance, path: str) -> bytes:
    with official_box.files.download(path) as stream:
        return stream.read()


def test_creation_with_ingress_and_the_sandbox_record(
    official: createos.Client, official_box: SandboxInstance
) -> None:
    data = official_box.refresh().data
    assert data.status is SandboxStatus.RUNNING
    assert data.ingress_enabled is True and "<port>" in data.ingress_url_template
    assert data.egress_rules == ["pypi.org"]
    assert data.created_at is not None
    assert official.get_sandbox(official_box.id).id == official_box.id
    assert official_box.id in [s.id for s in official.list_sandboxes()]
    assert "s-1vcpu-1gb" in [s.id for s in official.list_shapes()]


def test_preview_url_and_wait_for_port(official_box: SandboxInstance) -> None:
    official_box.files.upload("/workspace/index.html", b"<p>served by the sandbox</p>\n")
    port = serve(official_box)
    official_box.wait_for_port(port, timeout=10)
    page = requests.get(official_box.preview_url(port), timeout=10)
    assert page.status_code == 200 and page.text == "<p>served by the sandbox</p>\n"
    with pytest.raises(createos.OperationTimeout, match="did not become ready"):
        official_box.wait_for_port(1, timeout=1)


def test_set_ingress(official_box: SandboxInstance) -> None:
    port = serve(official_box)
    url = official_box.preview_url(port)
    official_box.set_ingress(False)
    assert official_box.data.ingress_enabled is False
    with pytest.raises(ValueError, match="ingress is not enabled"):
        official_box.preview_url(port)
    assert requests.get(url, timeout=10).status_code == 403
    official_box.set_ingress(True)
    assert official_box.preview_url(port) == url
    official_box.wait_for_port(port, timeout=10)
    assert requests.get(url, timeout=10).status_code == 200


def test_set_auto_pause(official_box: SandboxInstance) -> None:
    assert official_box.set_auto_pause(120).data.auto_pause_after_seconds == 120
    assert official_box.refresh().data.auto_pause_after_seconds == 120
    assert official_box.set_auto_pause(None).data.auto_pause_after_seconds is None
    with pytest.raises(ValueError, match="auto-pause timeout must be whole seconds"):
        official_box.set_auto_pause(30)


def test_egress(official_box: SandboxInstance) -> None:
    assert official_box.egress().egress_rules == ["pypi.org"]
    assert official_box.set_egress(["*.github.com", "10.0.0.0/8"]).egress_rules == [
        "*.github.com",
        "10.0.0.0/8",
    ]
    assert official_box.egress().egress_rules == ["*.github.com", "10.0.0.0/8"]
    assert official_box.refresh().data.egress_rules == ["*.github.com", "10.0.0.0/8"]


def test_shell_and_run_command(official_box: SandboxInstance) -> None:
    assert official_box.shell("echo hello; echo oops >&2").result.standard_output == "hello\n"
    with pytest.raises(createos.CommandError, match="status 3"):
        official_box.shell("exit 3")
    echo = RunCommandRequest(
        command="python3", arguments=["-c", "import sys; print(sys.stdin.read())"]
    )
    piped = official_box.run_command(echo, ExecOptions(standard_input="from stdin"))
    assert piped.result.exit_code == 0 and piped.result.standard_output == "from stdin\n"


def test_files_upload_and_download(official_box: SandboxInstance) -> None:
    payload = bytes(range(256)) * 1024
    official_box.files.upload("/workspace/data.bin", payload)
    assert _read(official_box, "/workspace/data.bin") == payload
    assert official_box.shell("wc -c < /workspace/data.bin").result.standard_output.strip() == str(
        len(payload)
    )


def test_pause_and_resume(official_box: SandboxInstance) -> None:
    official_box.pause()
    official_box.wait_until_paused(WAIT)
    official_box.resume()
    official_box.wait_until_running(WAIT)
    assert official_box.shell("echo back").result.standard_output == "back\n"


def test_managed_process_connect_input_wait_and_delete(official_box: SandboxInstance) -> None:
    """The managed-process flow of the production integration: create, connect, input,
    close stdin, long-poll ``/wait`` (408 while it runs), and delete."""
    created = official_box.processes.create(
        ManagedProcessCreateRequest(
            command="bash", arguments=["-c", "read line; echo got $line; cat >/dev/null"]
        )
    )
    with pytest.raises(createos.APIError) as early:
        official_box.processes.wait(
            created.process_id,
            ManagedProcessWaitOptions(scope=ManagedProcessWaitScope.TREE, wait_timeout=0.1),
        )
    assert early.value.status_code == 408  # not yet: the caller decides to poll again
    assert official_box.processes.input(created.process_id, "hello\n") >= 1
    official_box.processes.close_standard_input(created.process_id)
    done = official_box.processes.wait(
        created.process_id,
        ManagedProcessWaitOptions(scope=ManagedProcessWaitScope.TREE, wait_timeout=10.0),
    )
    assert (done.exit_code, done.tree_exited) == (0, True)
    with official_box.processes.connect(
        created.process_id, ManagedProcessConnectOptions()
    ) as stream:
        events = list(stream)
    output = b"".join(e.data for e in events if e.type.value == "data")
    assert output == b"got hello\n"
    assert events[-1].type.value == "exit" and events[-1].exit_code == 0
    assert [p.process_id for p in official_box.processes.list()] == [created.process_id]
    gone = official_box.processes.delete(created.process_id)
    assert gone.tree_exited


def test_terminal_process_and_resize(official_box: SandboxInstance) -> None:
    created = official_box.processes.create(
        ManagedProcessCreateRequest(
            command="bash", arguments=["-c", "read _; stty size"], pty=PTYSize(rows=30, cols=100)
        )
    )
    assert created.kind.value == "pty"
    official_box.processes.resize(created.process_id, PTYSize(rows=40, cols=120))
    official_box.processes.input(created.process_id, "\n")
    official_box.processes.wait(created.process_id, ManagedProcessWaitOptions(wait_timeout=10.0))
    with official_box.processes.connect(created.process_id) as stream:
        text = b"".join(e.data for e in stream if e.type.value == "data").decode()
    assert "40 120" in text
