"""Containment, round 4 (issue 35, the emulator's items): each scenario as an attacker runs it.

A disk's sub path swapped for a symlink, mount paths bubblewrap cannot make,
a token that forks, preview cookies that cross sandboxes, and typed text
longer than the desktop agent's answer takes. The host must never change.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
import requests

import createos_sync as cs
from createos_sync.emulator import Emulator

from ..ports import free_port
from ..waiting import wait_until
from .helpers import Api
from .test_computer import needs_desktop, xterm

DISK = {
    "name": "jobs", "kind": "s3", "config": {"bucket": "jobs", "endpoint": "https://s3.x"},
    "credentials": {"access_key": "AK", "secret_key": "SECRET-KEY"},
}  # fmt: skip


@pytest.fixture(params=["none", "bwrap"])
def mode_api(request: pytest.FixtureRequest, make_emu: Callable[..., Emulator]) -> Api:
    emu = make_emu(isolation=request.param)
    if emu.isolation != request.param:
        pytest.skip("bubblewrap does not work here")
    return Api(emu)


def run(api: Api, sandbox_id: str, script: str) -> dict[str, Any]:
    reply = api.data("POST", f"/v1/sandboxes/{sandbox_id}/exec",
                     json={"cmd": "bash", "args": ["-c", script]})  # fmt: skip
    result: dict[str, Any] = reply["result"]
    return result


def host_dir(tmp_path: Path) -> Path:
    """A host directory a sandbox must never change: one file, known content."""
    target = tmp_path / "host"
    target.mkdir()
    (target / "host.txt").write_text("the host's own\n")
    return target


def assert_untouched(target: Path) -> None:
    assert sorted(p.name for p in target.iterdir()) == ["host.txt"]  # nothing planted
    assert (target / "host.txt").read_text() == "the host's own\n"


# -- 1. a disk's sub path swapped for a symlink ---------------------------------------


def swap_sub_path_for_link(api: Api, target: Path) -> tuple[str, str, str]:
    """A sandbox with the disk whole at /mnt/all and its job-1 at /mnt/job, whose command
    swaps job-1 for a link to ``target`` (the issue's scenario), and another sandbox that
    mounted job-1 before. (disk id, the swapping sandbox, the other)"""
    disk_id = api.data("POST", "/v1/disks", json=DISK)["id"]
    job = {"disk_id": disk_id, "mount_path": "/mnt/job", "sub_path": "job-1"}
    sandbox = api.sandbox(disks=[{"disk_id": disk_id, "mount_path": "/mnt/all"}, job])
    other = api.sandbox(disks=[job])
    assert run(api, sandbox, "echo seed > /mnt/job/seed && cat /mnt/all/job-1/seed")["stdout"] == (
        "seed\n"
    )
    swap = run(api, sandbox, f"mv /mnt/all/job-1 /mnt/all/job-1.old && ln -s {target} "
                             "/mnt/all/job-1")  # fmt: skip
    assert swap["exit_code"] == 0, swap
    return disk_id, sandbox, other


def test_a_sub_path_swapped_for_a_link_never_reaches_the_host_from_commands(
    bwrap_api: Api, tmp_path: Path
) -> None:
    target = host_dir(tmp_path)
    _, sandbox, other = swap_sub_path_for_link(bwrap_api, target)
    write = "echo changed > /mnt/job/host.txt; echo planted > /mnt/job/planted.txt"
    for victim in (sandbox, other):  # the next command, and one in a sandbox mounted before
        result = run(bwrap_api, victim, write)
        assert result["exit_code"] != 0
        assert "sub_path leads through a symlink" in result["stderr"]
    assert_untouched(target)


def test_a_sub_path_swapped_for_a_link_never_reaches_the_host_from_the_files_api(
    mode_api: Api, tmp_path: Path
) -> None:
    target = host_dir(tmp_path)
    _, sandbox, other = swap_sub_path_for_link(mode_api, target)
    for victim in (sandbox, other):
        files = f"/v1/sandboxes/{victim}/files"
        for name in ("host.txt", "planted.txt"):
            put = mode_api.call("PUT", files, params={"path": f"/mnt/job/{name}"}, data=b"x")
            assert put.status_code == 403 and "symlink" in put.text
        read = mode_api.call("GET", files, params={"path": "/mnt/job/host.txt"})
        assert read.status_code == 403 and "symlink" in read.text
    assert_untouched(target)


def test_a_sub_path_swapped_for_a_link_is_refused_to_other_sandboxes(
    mode_api: Api, tmp_path: Path
) -> None:
    target = host_dir(tmp_path)
    disk_id, _, _ = swap_sub_path_for_link(mode_api, target)
    mount = {"disk_id": disk_id, "mount_path": "/mnt/job", "sub_path": "job-1"}
    created = mode_api.call("POST", "/v1/sandboxes", json={"shape": "s-1vcpu-1gb",
                                                           "disks": [mount]})  # fmt: skip
    assert created.status_code == 400 and "symlink" in created.text
    other = mode_api.sandbox()
    attach = mode_api.call("POST", f"/v1/sandboxes/{other}/disks", json=mount)
    assert attach.status_code == 400 and "symlink" in attach.text
    deeper = {**mount, "sub_path": "job-1/deeper"}  # a link on the way, not only at the end
    attach = mode_api.call("POST", f"/v1/sandboxes/{other}/disks", json=deeper)
    assert attach.status_code == 400 and "symlink" in attach.text
    assert_untouched(target)


@pytest.mark.parametrize("bind_fd", [True, False])
def test_a_bubblewrap_without_bind_fd_binds_the_opened_directory_too(
    bwrap_api: Api, tmp_path: Path, bind_fd: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where the disks cannot be mounted before bubblewrap starts (``diskmount``) and
    bubblewrap lacks ``--bind-fd``, the disk is bound from /proc/self/fd/N: the directory
    that was opened, not a path looked up again."""
    from createos_sync.emulator._machine import isolation as isolation_module

    monkeypatch.setattr(isolation_module, "mounter_works", lambda: False)
    isolation = bwrap_api.emu._require_store().isolation
    assert isolation.name == "bwrap"
    isolation.bind_fd = bind_fd  # type: ignore[union-attr]
    target = host_dir(tmp_path)
    _, sandbox, _ = swap_sub_path_for_link(bwrap_api, target)  # mounted and used first
    result = run(bwrap_api, sandbox, "echo planted > /mnt/job/planted.txt")
    assert result["exit_code"] != 0 and "sub_path leads through a symlink" in result["stderr"]
    assert_untouched(target)


def test_the_sandbox_that_swapped_keeps_its_disk_once_the_link_goes(
    bwrap_api: Api, tmp_path: Path
) -> None:
    target = host_dir(tmp_path)
    disk_id, sandbox, _ = swap_sub_path_for_link(bwrap_api, target)
    # The link is in the disk, so the whole-disk mount cannot be used to remove it (every
    # command binds /mnt/job too, and that is refused): detach the sub path, repair, attach.
    detach = f"/v1/sandboxes/{sandbox}/disks/{disk_id}"
    bwrap_api.data("DELETE", detach, params={"mount_path": "/mnt/job"})
    repair = run(bwrap_api, sandbox, "rm /mnt/all/job-1 && mv /mnt/all/job-1.old /mnt/all/job-1")
    assert repair["exit_code"] == 0, repair
    mount = {"disk_id": disk_id, "mount_path": "/mnt/job", "sub_path": "job-1"}
    bwrap_api.data("POST", f"/v1/sandboxes/{sandbox}/disks", json=mount)
    assert run(bwrap_api, sandbox, "cat /mnt/job/seed")["stdout"] == "seed\n"
    # The disk is bound by a descriptor, which the command does not inherit.
    fds = run(bwrap_api, sandbox, "ls /proc/self/fd")["stdout"].split()
    assert sorted(fds, key=int) == ["0", "1", "2", "3"], fds  # 3: the directory ls reads
    assert_untouched(target)


@pytest.mark.parametrize("mount_path", ["/workspace/a/b", "/mnt/a/b"])
def test_a_mount_point_swapped_for_a_link_never_makes_a_host_directory(
    bwrap_api: Api, tmp_path: Path, mount_path: str
) -> None:
    """bubblewrap makes a missing mount point following links: a parent of it that a
    command swapped for a link to ``/oldroot/...`` (the host, while bubblewrap sets up)
    would have it make a host directory."""
    target = host_dir(tmp_path)
    disk_id = bwrap_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = bwrap_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": mount_path}])
    parent = mount_path.rsplit("/", 1)[0]
    swap = run(bwrap_api, sandbox, f"mv {parent} {parent}.old && ln -s /oldroot{target} {parent}")
    assert swap["exit_code"] == 0, swap
    result = run(bwrap_api, sandbox, "echo next")
    assert result["exit_code"] != 0 and "mount point leads through a symlink" in result["stderr"]
    assert_untouched(target)


# -- 2. mount paths: mounted and working, or refused at attach ------------------------------

SDK_ACCEPTS = [
    "/run/createos-emulator/x", "/run/createos-emulator/reporter.py", "/run",
    "/mnt/" + "n" * 300, "/mnt/" + "n" * 255, "/" + "/".join(["d" * 200] * 20),
    "/etc/hosts", "/etc/resolv.conf/x", "/etc", "/usr", "/bin", "/bin/x", "/home",
    "/workspace", "/workspace/data", "/home/user/x", "/tmp/x", "/etc/x", "/mnt/a b", "/mnt/é",
]  # fmt: skip


def test_every_mount_path_the_sdk_accepts_works_or_is_refused_at_attach(bwrap_api: Api) -> None:
    from createos_sync.checks import mount_path

    disk_id = bwrap_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = bwrap_api.sandbox()
    attach = f"/v1/sandboxes/{sandbox}/disks"
    mounted = 0
    for path in SDK_ACCEPTS:
        assert mount_path(path) == path
        answer = bwrap_api.call("POST", attach, json={"disk_id": disk_id, "mount_path": path})
        if answer.status_code == 400:
            assert answer.json()["message"].startswith(("mount_path", "each name", "this emu"))
            continue
        assert answer.status_code == 200, answer.text
        mounted += 1
        marker = f"{path}/.mounted-{mounted}"
        result = run(bwrap_api, sandbox, f'touch "{marker}" && ls -a "{path}"')
        assert result["exit_code"] == 0, (path[:40], result["stderr"])
        read = bwrap_api.call("GET", f"/v1/sandboxes/{sandbox}/files", params={"path": marker})
        assert read.status_code == 200, path[:40]
        detach = f"{attach}/{disk_id}"
        bwrap_api.data("DELETE", detach, params={"mount_path": path})
    assert mounted >= 8  # most of them work


def test_the_raw_api_refuses_what_the_sdk_refuses_with_its_words(mode_api: Api) -> None:
    from createos_sync._resources.checks import sub_path
    from createos_sync.checks import mount_path

    disk_id = mode_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = mode_api.sandbox()
    attach = f"/v1/sandboxes/{sandbox}/disks"
    refused = ["/" + "a" * 4096, "//x", "/mnt/x/", "relative", "/proc/x", "/mnt/a\tb"]
    for path in refused:
        with pytest.raises(ValueError) as sdk:
            mount_path(path)
        answer = mode_api.call("POST", attach, json={"disk_id": disk_id, "mount_path": path})
        assert answer.status_code == 400 and answer.json()["message"] == str(sdk.value)
    for sub in ("a" * 4097, "/abs", "a/../b", "a\nb"):
        with pytest.raises(ValueError) as sdk:
            sub_path(sub)
        body = {"disk_id": disk_id, "mount_path": "/mnt/s", "sub_path": sub}
        answer = mode_api.call("POST", attach, json=body)
        assert answer.status_code == 400 and answer.json()["message"] == str(sdk.value)
    creation = {"shape": "s-1vcpu-1gb", "disks": [{"disk_id": disk_id, "mount_path": "//x"}]}
    assert mode_api.call("POST", "/v1/sandboxes", json=creation).status_code == 400


# -- 3. an access token never creates a sandbox ------------------------------------------


def test_an_access_token_cannot_fork_its_sandbox(api: Api) -> None:
    mine = api.sandbox()
    token = api.data("POST", f"/v1/sandboxes/{mine}/access-token")["token"]
    as_token = {"X-Api-Key": token}
    before = {s["id"] for s in api.data("GET", "/v1/sandboxes")["data"]}
    fork = api.call("POST", f"/v1/sandboxes/{mine}/fork", headers=as_token, json={})
    assert fork.status_code == 403 and "own sandbox only" in fork.text
    create = api.call("POST", "/v1/sandboxes", headers=as_token, json={"shape": "s-1vcpu-1gb"})
    assert create.status_code == 403
    template = {"name": "t", "dockerfile": "FROM createos/base\n"}
    assert api.call("POST", "/v1/templates", headers=as_token, json=template).status_code == 403
    assert {s["id"] for s in api.data("GET", "/v1/sandboxes")["data"]} == before  # nothing made
    assert api.call("GET", f"/v1/sandboxes/{mine}", headers=as_token).status_code == 200


def test_a_template_workdir_through_a_link_never_makes_a_host_directory(
    bwrap_api: Api, tmp_path: Path
) -> None:
    from createos_sync import TemplateBuildError

    target = host_dir(tmp_path)
    dockerfile = f"FROM ubuntu:24.04\nRUN ln -s {target} /workspace/a\nWORKDIR /workspace/a/new\n"
    with bwrap_api.emu.client() as client, pytest.raises(TemplateBuildError, match="WORKDIR"):
        client.build_template("linked", dockerfile)
    assert_untouched(target)


# -- 4. preview cookies stay with the preview that set them ---------------------------------

# Sets each ?c= as a Set-Cookie (an Upgrade too, answered 101), answers the Cookie it got.
COOKIE_APP = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlsplit
class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass
    def do_GET(self):
        cookies = parse_qs(urlsplit(self.path).query).get("c", [])
        upgrade = bool(self.headers.get("Upgrade"))
        body = b"" if upgrade else (self.headers.get("Cookie") or "-").encode()
        self.send_response(101 if upgrade else 200)
        for cookie in cookies:
            self.send_header("Set-Cookie", cookie)
        if upgrade:
            self.send_header("Connection", "Upgrade")
            self.send_header("Upgrade", "echo")
        else:
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
server.serve_forever()
"""


def cookie_app(box: cs.Lease) -> str:
    """The preview URL of the cookie app in ``box``, once it listens."""
    port = free_port()
    box.write_file("/workspace/cookies.py", COOKIE_APP)
    box.start(["python3", "/workspace/cookies.py", str(port)])
    box.wait_for_port(port, timeout=30)
    return box.preview_url(port)


def test_a_preview_cookie_never_reaches_another_sandbox_in_the_host_form(
    make_emu: Callable[..., Emulator],
) -> None:
    emu = make_emu(previews="host")
    with (
        emu.client() as client,
        cs.lease(client=client, ingress=True) as a,
        cs.lease(client=client, ingress=True) as b,
        emu.preview_session() as browser,  # requests' cookie jar: http.cookiejar's policy
    ):
        url_a, url_b = cookie_app(a), cookie_app(b)
        host_a = urlsplit(url_a).hostname
        sent = ["wide=1; Domain=sb.localhost; Path=/", "dotted=1; Domain=.sb.localhost",
                f"own=1; Domain={host_a}", "top=1; Domain=localhost; Path=/"]  # fmt: skip
        for cookie in sent:
            assert browser.get(url_a, params={"c": cookie}, timeout=10).ok
        assert browser.get(url_b, timeout=10).text == "-"  # B's app receives none of them
        assert browser.get(url_b + "deep/page", timeout=10).text == "-"
        at_a = browser.get(url_a, timeout=10).text.split("; ")
        assert sorted(at_a) == ["dotted=1", "own=1", "top=1", "wide=1"]
        assert {c.domain for c in browser.cookies} == {host_a}  # host-only, A's host alone


def test_a_preview_cookie_stays_under_its_path_in_the_path_form(
    make_emu: Callable[..., Emulator],
) -> None:
    emu = make_emu(previews="path")
    with (
        emu.client() as client,
        cs.lease(client=client, ingress=True) as a,
        cs.lease(client=client, ingress=True) as b,
        requests.Session() as browser,
    ):
        url_a, url_b = cookie_app(a), cookie_app(b)
        prefix_a = urlsplit(url_a).path  # /_ingress/<a>/<port>/
        for cookie in ("root=1; Path=/", "bare=1", "api=1; Path=/v1", "wide=1; Domain=127.0.0.1"):
            assert browser.get(url_a, params={"c": cookie}, timeout=10).ok
        assert browser.get(url_b, timeout=10).text == "-"  # another preview: none
        api = browser.get(emu.url + "/v1/healthz", timeout=10)
        assert api.ok and "Cookie" not in api.request.headers  # nor the API
        assert sorted(browser.get(url_a + "page", timeout=10).text.split("; ")) == [
            "bare=1", "root=1", "wide=1"
        ]  # fmt: skip
        assert "api=1" in browser.get(url_a + "v1/x", timeout=10).text  # its own /v1
        assert {c.path for c in browser.cookies} == {prefix_a, prefix_a + "v1"}
        # An upgrade's answer (a WebSocket's 101) is scoped the same way.
        head = upgrade_head(url_a, "ws=1; Domain=localhost; Path=/")
        assert f"Set-Cookie: ws=1; Path={prefix_a}\r\n".encode() in head


def upgrade_head(url: str, cookie: str) -> bytes:
    parts = urlsplit(url)
    assert parts.hostname is not None and parts.port is not None
    with socket.create_connection((parts.hostname, parts.port), timeout=10) as sock:
        sock.sendall(
            f"GET {parts.path}?c={quote(cookie)} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
            "Connection: Upgrade\r\nUpgrade: echo\r\n\r\n".encode()
        )
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(1024)
            assert chunk, head
            head += chunk
    assert head.split(b" ", 2)[1] == b"101", head
    return head


# -- 5. type() of all the SDK accepts -------------------------------------------------------


def read_text(box: cs.Lease, path: str) -> str | None:
    try:
        return box.read_file(path).decode()
    except cs.CreateosApiError:
        return None


@needs_desktop
def test_type_types_all_the_sdk_accepts_or_refuses_before_typing(emu: Emulator) -> None:
    with emu.client() as client, client.lease(rootfs="desktop:1") as box:
        computer = box.computer
        xterm(box)
        computer.type("cat > /workspace/typed.txt\n")
        # 100,000 characters (the SDK's limit), 80 a line (the tty's line stays short).
        text = "".join(f"{i:05d} " + "typed-" * 12 + ".\n" for i in range(1250))
        assert len(text) == 100_000
        computer.type(text)  # answered 504 after 20 s with some 1,600 characters typed
        computer.press("ctrl", "d")
        typed = wait_until(lambda: read_text(box, "/workspace/typed.txt"), "cat's file")
        wait_until(lambda: read_text(box, "/workspace/typed.txt") == text, "every line", 60)
        assert typed is not None
        # A pace asked for that takes too long is refused before a character is typed.
        api = Api(emu)
        slow = {"text": "echo " + "r" * 200 + " > /workspace/refused.txt\n", "delay_in_ms": 1000}
        keyboard = f"/v1/sandboxes/{box.id}/computer/keyboard/type"
        refused = api.call("POST", keyboard, json=slow)
        assert refused.status_code == 400 and "smaller delay_in_ms" in refused.text
        computer.type("echo done > /workspace/done.txt\n")
        wait_until(lambda: read_text(box, "/workspace/done.txt") == "done\n", "the next line")
        assert read_text(box, "/workspace/refused.txt") is None


def test_the_typing_pace_fits_the_sdks_default_timeout() -> None:
    from createos_sync.config import Config
    from createos_sync.emulator._machine.desktop import typing_pace
    from createos_sync.emulator._service.api_computer import ANSWER_SPARE, MAX_TEXT
    from createos_sync.emulator._wire import ApiError

    assert typing_pace(10, 0)[0] == 12  # xdotool's own pace for short text
    delay, seconds = typing_pace(MAX_TEXT, 0)
    default = Config(api_key="k", base_url="http://127.0.0.1:1").timeout
    assert delay == 0 and seconds + ANSWER_SPARE < default  # answered within it
    assert typing_pace(100, 500) == (500, pytest.approx(170.2))  # as asked, when it fits
    with pytest.raises(ApiError, match="smaller delay_in_ms"):
        typing_pace(61, 1000)
