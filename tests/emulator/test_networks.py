"""Each sandbox's network (``_netns``): every way of launching a command starts inside it.

Processes, terminals and template build steps are all launched by the
spawner inside the network namespace it enters; under bubblewrap with a
writable layer, ``nsenter --mount`` into the sandbox's layer keeps that
network. A namespace is named by ``/proc/self/ns/net``.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from createos_sync.emulator import Emulator

from .helpers import Api, output

NETNS = "readlink /proc/self/ns/net"
# Exit 0 if nothing answers at the guest agent's address of a private network.
NO_AGENT = "! (exec 3<>/dev/tcp/127.0.0.1/1029) 2>/dev/null"


def _seen(api: Api, sandbox_id: str, script: str, **body: object) -> str:
    process_id = api.process(sandbox_id, "bash", "-c", script, **body)
    return output(api.frames(sandbox_id, process_id)).decode().strip()


@pytest.fixture
def private(make_emu: Callable[..., Emulator]) -> Api:
    emu = make_emu()
    if emu.network != "private":
        pytest.skip(f"this machine gives sandboxes no private network ({emu.network})")
    return Api(emu)


def test_a_process_and_a_terminal_share_their_sandboxs_network_and_layer(private: Api) -> None:
    host = os.readlink("/proc/self/ns/net")
    first, second = private.sandbox(), private.sandbox()
    layered = private.emu._require_store().isolation.overlays is not None
    mark = "echo kept > /opt/.netns-mark; " if layered else ""
    mine = _seen(private, first, f"{mark}{NETNS}")
    on_a_terminal = _seen(private, first, f"{NETNS}; cat /opt/.netns-mark 2>/dev/null",
                          pty={"rows": 24, "cols": 80})  # fmt: skip
    assert mine.startswith("net:[") and mine != host
    assert on_a_terminal.split() == [mine, *(["kept"] if layered else [])]
    assert _seen(private, second, NETNS) not in (mine, host)


def test_a_template_build_step_runs_in_a_network_of_its_own_without_guest_agent(
    private: Api,
) -> None:
    host = os.readlink("/proc/self/ns/net")
    with private.emu.client() as client:
        lines: list[str] = []
        client.build_template(
            "netns", f"FROM ubuntu:24.04\nRUN {NETNS}\nRUN {NO_AGENT}\n", on_log=lines.append
        )
    [step] = [line for line in lines if line.startswith("net:[")]
    assert step != host
