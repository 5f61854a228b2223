"""The emulator's isolation, attacked (issue 23): a sandboxed command never changes the host.

Root keeps only a user namespace's capabilities in bubblewrap (``isolation``,
``userns``): it adds users and becomes them, but cannot open a host file by
handle, remount a read-only bind, or write ``/proc/sys``; each sandbox has its
own ``resolv.conf`` and ``hosts``. The files API opens paths
beneath the sandbox's tree (``beneath``): a command racing it with a symlink
to a host directory never makes it write there.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from createos_sync.emulator import Emulator
from createos_sync.emulator._machine.isolation import Bubblewrap
from createos_sync.emulator._machine.userns import SUBORDINATE, SYSTEM_IDS, USER_CAPABILITIES

from ..waiting import wait_until
from .helpers import Api, output

FILES = "/v1/sandboxes/{}/files"
RACE_WRITES = 1500  # main let a write through within 17 to 505 of these


def _seen(api: Api, sandbox_id: str, script: str) -> str:
    process_id = api.process(sandbox_id, "bash", "-c", script)
    return output(api.frames(sandbox_id, process_id)).decode().strip()


@pytest.fixture
def root_bwrap(make_emu: Callable[..., Emulator]) -> Api:
    if os.geteuid() != 0:
        pytest.skip("these attacks need the emulator to run as root (as CI does)")
    emu = make_emu()
    if emu.isolation != "bwrap":
        pytest.skip("bubblewrap does not work here")
    return Api(emu)


def _handle(path: Path) -> bytes:
    """``struct file_handle`` of ``path``, as ``name_to_handle_at`` makes it on the host."""
    libc = ctypes.CDLL(None, use_errno=True)
    buffer = ctypes.create_string_buffer(struct.pack("Ii", 128, 0) + bytes(128))
    mount_id = ctypes.c_int()
    if libc.name_to_handle_at(-100, os.fsencode(path), buffer, ctypes.byref(mount_id), 0):
        pytest.skip("this file system gives no file handles")
    size = struct.unpack_from("I", buffer.raw)[0]
    return buffer.raw[: 8 + size]


OPEN_BY_HANDLE = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
handle = ctypes.create_string_buffer(bytes.fromhex(sys.argv[1]))
workspace = os.open("/workspace", os.O_RDONLY)
fd = libc.open_by_handle_at(workspace, handle, os.O_RDONLY | os.O_DIRECTORY)
if fd < 0:
    print("refused", os.strerror(ctypes.get_errno()))
else:
    target = os.open("target.txt", os.O_WRONLY | os.O_TRUNC, dir_fd=fd)
    os.write(target, b"written from a sandbox")
    print("written")
"""


def test_root_in_a_sandbox_cannot_open_a_host_file_by_handle(
    root_bwrap: Api, tmp_path: Path
) -> None:
    sandbox_id = root_bwrap.sandbox()
    workspace = root_bwrap.emu.sandbox_path(sandbox_id, "/workspace")
    if os.stat(workspace).st_dev != os.stat(tmp_path).st_dev:
        pytest.skip("the sandbox's storage is on another file system than pytest's tmp_path")
    target = tmp_path / "target.txt"
    target.write_text("host original")
    root_bwrap.data("PUT", FILES.format(sandbox_id), params={"path": "/workspace/h.py"},
                    data=OPEN_BY_HANDLE.encode())  # fmt: skip
    seen = _seen(root_bwrap, sandbox_id, f"python3 /workspace/h.py {_handle(tmp_path).hex()}")
    assert seen.startswith("refused")
    assert target.read_text() == "host original"
    assert _seen(root_bwrap, sandbox_id, "grep CapEff /proc/self/status").split()[1:] == [
        _expected_capabilities(root_bwrap)
    ]


def _expected_capabilities(api: Api) -> str:
    """CapEff of sandboxed root: its user namespace's ``USER_CAPABILITIES``, or none."""
    isolation = api.emu._require_store().isolation
    if not (isinstance(isolation, Bubblewrap) and isolation.has_users):
        return "0000000000000000"
    mask = sum(1 << CAPABILITY_BITS[name] for name in USER_CAPABILITIES)
    return f"{mask:016x}"


CAPABILITY_BITS = {  # linux/capability.h
    "CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_FSETID": 4, "CAP_KILL": 5,
    "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_SETPCAP": 8, "CAP_NET_BIND_SERVICE": 10,
    "CAP_SYS_CHROOT": 18,
}  # fmt: skip


def test_root_adds_users_and_becomes_them_and_the_host_stays_unchanged(root_bwrap: Api) -> None:
    """As in a microVM: ``useradd``, ``runuser`` and ``su`` work, file modes hold for the
    user, and neither the host's accounts nor its files change (issue 38)."""
    isolation = root_bwrap.emu._require_store().isolation
    if not (isinstance(isolation, Bubblewrap) and isolation.has_users):
        pytest.skip("bubblewrap cannot join a user namespace with users here")
    passwd, shadow = Path("/etc/passwd").read_bytes(), Path("/etc/shadow").read_bytes()
    sandbox_id = root_bwrap.sandbox()
    seen = _seen(root_bwrap, sandbox_id,
                 "useradd -m alice && runuser -u alice -- id -un && su -s /bin/sh alice -c 'id -un'"
                 " && echo secret > /tmp/only-root && chmod 600 /tmp/only-root"
                 " && (runuser -u alice -- cat /tmp/only-root 2>/dev/null || echo denied)"
                 " && runuser -u alice -- touch /home/alice/mine && stat -c %U /home/alice/mine"
                 " && (runuser -u alice -- touch /etc/x 2>/dev/null || echo denied)"
                 " && grep -c '^alice:' /etc/passwd")  # fmt: skip
    assert seen.split() == ["alice", "alice", "denied", "alice", "denied", "1"]
    assert Path("/etc/passwd").read_bytes() == passwd and Path("/etc/shadow").read_bytes() == shadow
    assert not Path("/home/alice").exists()
    # Accounts' ids map to a subordinate range that owns nothing on the host.
    assert _seen(root_bwrap, sandbox_id, "cat /proc/self/uid_map").split() == [
        "0", "0", str(SYSTEM_IDS), str(SYSTEM_IDS), str(SUBORDINATE + SYSTEM_IDS),
        str(65536 - SYSTEM_IDS),
    ]  # fmt: skip


def test_root_cannot_write_proc_sys_nor_remount_a_read_only_bind(root_bwrap: Api) -> None:
    sandbox_id = root_bwrap.sandbox()
    setting = "/proc/sys/kernel/printk_ratelimit"  # written back with its own value
    seen = _seen(root_bwrap, sandbox_id,
                 f"(cat {setting} > {setting}) 2>/dev/null && echo sysctl-written; "
                 "mount -o remount,bind,rw /usr 2>/dev/null && echo remounted; "
                 "echo done")  # fmt: skip
    assert seen == "done"


def test_each_sandbox_has_its_own_resolv_conf_and_hosts(root_bwrap: Api) -> None:
    if root_bwrap.emu.network != "private":
        pytest.skip("resolv.conf is the host's own in the shared network")
    first, second = root_bwrap.sandbox(), root_bwrap.sandbox()
    before = _seen(root_bwrap, second, "cat /etc/resolv.conf /etc/hosts")
    # Made writable by a remount where root keeps CAP_SYS_ADMIN, or the sandbox's own copy.
    attack = "mount -o remount,bind,rw /etc/resolv.conf 2>/dev/null; "
    attack += "echo 'nameserver 192.0.2.1' > /etc/resolv.conf; echo '192.0.2.1 evil' >> /etc/hosts"
    _seen(root_bwrap, first, attack)
    assert "192.0.2.1" in _seen(root_bwrap, first, "cat /etc/resolv.conf /etc/hosts")
    assert _seen(root_bwrap, second, "cat /etc/resolv.conf /etc/hosts") == before
    assert "192.0.2.1" not in Path("/etc/hosts").read_text()


def test_a_template_build_step_runs_with_its_user_namespace_capabilities_alone(
    root_bwrap: Api,
) -> None:
    with root_bwrap.emu.client() as client:
        lines: list[str] = []
        client.build_template(
            "caps", "FROM ubuntu:24.04\nRUN grep CapEff /proc/self/status\n", on_log=lines.append
        )
    expected = ["CapEff:", _expected_capabilities(root_bwrap)]
    assert any(line.split()[-2:] == expected for line in lines), lines


SWAP = """
import os, shutil, sys
os.chdir(sys.argv[2])  # an argument: plain mode maps /workspace there
host_dir = bytes.fromhex(sys.argv[1]).decode()  # hex: plain mode must not map its /tmp
open("swapping", "w").close()
while not os.path.exists("stop"):
    try:
        if os.path.islink("d"):
            os.unlink("d")
        elif os.path.isdir("d"):
            shutil.rmtree("d")
        os.mkdir("d")
        os.rename("d", "old")
        shutil.rmtree("old")
        os.symlink(host_dir, "d")
    except OSError:
        pass
"""


def test_a_write_racing_a_symlink_swap_never_lands_on_the_host(
    any_api: Api, tmp_path: Path
) -> None:
    """A command turns /workspace/d into a symlink to a host directory and back, in a loop."""
    sandbox_id = any_api.sandbox()
    host_dir = tmp_path / "host"
    host_dir.mkdir()
    files = FILES.format(sandbox_id)
    any_api.data("PUT", files, params={"path": "/workspace/swap.py"}, data=SWAP.encode())
    hidden = str(host_dir).encode().hex()
    any_api.process(sandbox_id, "python3", "/workspace/swap.py", hidden, "/workspace")
    wait_until(any_api.emu.sandbox_path(sandbox_id, "/workspace/swapping").exists,
               what="the swapping loop")  # fmt: skip
    statuses = set()
    for _ in range(RACE_WRITES):
        response = any_api.call("PUT", files, params={"path": "/workspace/d/r.txt"}, data=b"x")
        statuses.add(response.status_code)
        assert not (host_dir / "r.txt").exists()
    any_api.data("PUT", files, params={"path": "/workspace/stop"}, data=b"")
    assert 500 not in statuses and statuses & {200}, statuses
    assert os.listdir(host_dir) == []


def test_reads_and_writes_through_a_symlink_out_of_the_tree_are_refused(
    any_api: Api, tmp_path: Path
) -> None:
    sandbox_id = any_api.sandbox()
    files = FILES.format(sandbox_id)
    (tmp_path / "secret").write_text("host secret")
    workspace = any_api.emu.sandbox_path(sandbox_id, "/workspace")
    (workspace / "sub").mkdir()
    os.symlink("../../../../../../../../../..", workspace / "sub" / "up")  # a relative escape
    os.symlink(tmp_path, workspace / "abs")
    os.mkfifo(workspace / "fifo")
    for path in (f"/workspace/sub/up{tmp_path}/secret", "/workspace/abs/secret"):
        assert any_api.call("GET", files, params={"path": path}).status_code == 403
        assert any_api.call("PUT", files, params={"path": path}, data=b"x").status_code == 403
    new = any_api.call("PUT", files, params={"path": "/workspace/abs/new"}, data=b"x")
    assert new.status_code == 403
    assert not (tmp_path / "new").exists() and (tmp_path / "secret").read_text() == "host secret"
    assert any_api.call("GET", files, params={"path": "/workspace/fifo"}).status_code == 400


def test_the_whole_tree_is_served_where_the_sandbox_has_a_layer(any_api: Api) -> None:
    """Frameworks write anywhere (/etc/...): the layer takes it, the host never does."""
    sandbox_id = any_api.sandbox()
    files = FILES.format(sandbox_id)
    layered = any_api.emu._require_store().isolation.overlays is not None
    paths = ["/etc/createos-h23.conf", "/opt/createos-h23/x", "/createos-h23/y"]
    paths.append("/bin/createos-h23")
    for path in paths:
        response = any_api.call("PUT", files, params={"path": path}, data=path.encode())
        assert response.status_code == (200 if layered else 403), (path, response.text)
        assert not os.path.lexists(path)
    if layered:
        seen = _seen(any_api, sandbox_id, f"cat {' '.join(paths[:3])} /usr/bin/createos-h23")
        assert seen == "".join(paths)  # /bin is a link to usr/bin on this system, or /bin
        for path in paths:
            assert any_api.call("GET", files, params={"path": path}).content == path.encode()
        assert b"root:" in any_api.call("GET", files, params={"path": "/etc/passwd"}).content
    for path in ("/proc/self/environ", "/dev/null"):
        assert any_api.call("GET", files, params={"path": path}).status_code == 403
    shutil.rmtree("/createos-h23", ignore_errors=True)  # never made: only if this test fails
