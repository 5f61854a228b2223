"""Containment, round 5 (issue 35's residual): a mount point swapped while bubblewrap starts.

The round-4 check makes each disk's mount point beneath the sandbox's tree
before bubblewrap runs; a command of the same sandbox running at that very
moment could still swap a parent of the mount point for a link to the host
between that check and bubblewrap's own ``mkdir`` of the mount point. The
race is forced here: the swap is made (as the concurrent command would make
it, through the sandbox's own tree) right after the check, every time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from createos_sync.emulator._machine.storage import Layered, Storage

from .helpers import Api
from .test_containment_round4 import DISK, assert_untouched, host_dir, run

MOUNT_PATHS = ["/workspace/a/b", "/mnt/a/b", "/workspace/x/y/z"]


@pytest.fixture
def swap_after_check(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[str, Path]]]:
    """Once a mount point ``(mount, host dir)`` listed here was checked, swap its parent for
    a link to ``/oldroot/<host dir>`` (the host, while bubblewrap sets up): the instant a
    concurrent command of the sandbox would win the race."""
    armed: list[tuple[str, Path]] = []
    check = Storage.make_mount_point

    def check_then_swap(self: Storage, mount: str, layered: Layered | None) -> None:
        check(self, mount, layered)
        for armed_mount, target in list(armed):
            if armed_mount == mount:
                armed.remove((armed_mount, target))
                parent = mount.rsplit("/", 1)[0]
                base, relative = self.place(parent, layered)
                try:
                    os.rename(relative, relative + ".old", src_dir_fd=base, dst_dir_fd=base)
                    os.symlink(f"/oldroot{target}", relative, dir_fd=base)
                finally:
                    os.close(base)

    monkeypatch.setattr(Storage, "make_mount_point", check_then_swap)
    yield armed


@pytest.mark.parametrize("mount_path", MOUNT_PATHS)
def test_a_parent_swapped_while_bubblewrap_starts_never_makes_a_host_directory(
    bwrap_api: Api, tmp_path: Path, mount_path: str, swap_after_check: list[tuple[str, Path]]
) -> None:
    target = host_dir(tmp_path)
    disk_id = bwrap_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = bwrap_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": mount_path}])
    assert run(bwrap_api, sandbox, f"touch {mount_path}/seed")["exit_code"] == 0
    swap_after_check.append((mount_path, target))
    raced = run(bwrap_api, sandbox, "echo raced")
    assert not swap_after_check  # the swap was made, after the check
    assert_untouched(target)
    # Refused, as the check would have refused it (never mounted through the link).
    assert raced["exit_code"] != 0, raced
    assert "mount point leads through a symlink" in raced["stderr"], raced
    # The link removed and the directory put back, the disk mounts again, with its file.
    parent = mount_path.rsplit("/", 1)[0]
    repair = run(bwrap_api, sandbox, "true")
    assert repair["exit_code"] != 0  # the link is still there: refused by the check
    storage_fix = f"rm {parent} && mv {parent}.old {parent}"
    swap_after_check.clear()
    fixed = _run_unmounted(bwrap_api, sandbox, disk_id, mount_path, storage_fix)
    assert fixed["exit_code"] == 0, fixed
    assert run(bwrap_api, sandbox, f"ls {mount_path}")["stdout"] == "seed\n"
    assert_untouched(target)


def _run_unmounted(
    api: Api, sandbox: str, disk_id: str, mount_path: str, script: str
) -> dict[str, object]:
    """Run ``script`` with the disk detached, then attach it again."""
    detach = f"/v1/sandboxes/{sandbox}/disks/{disk_id}"
    api.data("DELETE", detach, params={"mount_path": mount_path})
    result = run(api, sandbox, script)
    mount = {"disk_id": disk_id, "mount_path": mount_path}
    api.data("POST", f"/v1/sandboxes/{sandbox}/disks", json=mount)
    return result


@pytest.fixture
def unlayered_api(bwrap_api: Api) -> Api:
    """bubblewrap with no writable layer: a read-only root of bubblewrap's own."""
    isolation = bwrap_api.emu._require_store().isolation
    isolation.overlays = None  # type: ignore[union-attr]
    return bwrap_api


def test_without_a_layer_the_race_is_closed_too(
    unlayered_api: Api, tmp_path: Path, swap_after_check: list[tuple[str, Path]]
) -> None:
    target = host_dir(tmp_path)
    disk_id = unlayered_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = unlayered_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": "/workspace/a/b"}])
    swap_after_check.append(("/workspace/a/b", target))
    raced = run(unlayered_api, sandbox, "echo raced")
    assert not swap_after_check
    assert raced["exit_code"] != 0 and "mount point leads through a symlink" in raced["stderr"]
    assert_untouched(target)


def test_without_a_layer_a_disk_outside_the_storage_is_bound_from_its_stage(
    unlayered_api: Api,
) -> None:
    """/mnt/a/b is in bubblewrap's fresh root, which no command writes: the disk is mounted
    on the emulator's staging directory, and bubblewrap binds that (an inner disk too)."""
    disk_id = unlayered_api.data("POST", "/v1/disks", json=DISK)["id"]
    disks = [{"disk_id": disk_id, "mount_path": "/mnt/a/b"},
             {"disk_id": disk_id, "mount_path": "/mnt/a/b/in", "sub_path": "job"}]  # fmt: skip
    sandbox = unlayered_api.sandbox(disks=disks)
    wrote = run(unlayered_api, sandbox, "echo hi > /mnt/a/b/in/f && cat /mnt/a/b/job/f")
    assert wrote["stdout"] == "hi\n", wrote
    read = unlayered_api.call(
        "GET", f"/v1/sandboxes/{sandbox}/files", params={"path": "/mnt/a/b/in/f"}
    )
    assert read.status_code == 200 and read.content == b"hi\n"


@pytest.mark.xfail(
    strict=True,
    reason="the documented limit: where diskmount cannot work (no mount namespace can be "
    "made, not even in a user namespace; a kernel before 5.2), bubblewrap makes the mount "
    "point itself, and a swap in that instant makes one empty host directory",
)
def test_where_disks_cannot_be_mounted_first_the_window_remains(
    bwrap_api: Api,
    tmp_path: Path,
    swap_after_check: list[tuple[str, Path]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from createos_sync.emulator._machine import isolation

    monkeypatch.setattr(isolation, "mounter_works", lambda: False)
    target = host_dir(tmp_path)
    disk_id = bwrap_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = bwrap_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": "/workspace/a/b"}])
    swap_after_check.append(("/workspace/a/b", target))
    run(bwrap_api, sandbox, "echo raced")
    assert_untouched(target)


def test_the_probe_says_when_disks_cannot_be_mounted_first(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from createos_sync.emulator._machine import diskbind

    diskbind.mounter_works.cache_clear()
    try:
        with monkeypatch.context() as patched:
            patched.setattr(diskbind, "MOUNTER", "/nonexistent/diskmount.py")
            assert not diskbind.mounter_works()
    finally:
        diskbind.mounter_works.cache_clear()
    assert "could make one empty directory on this machine" in caplog.text
    assert diskbind.mounter_works() == (os.geteuid() == 0 or _has_user_namespaces())


def _has_user_namespaces() -> bool:
    import subprocess

    done = subprocess.run(["unshare", "--user", "--mount", "true"], capture_output=True)
    return done.returncode == 0


def test_a_command_swapping_in_a_loop_never_makes_a_host_directory(
    bwrap_api: Api, tmp_path: Path
) -> None:
    """The race as an attacker runs it, unforced: a background command of the sandbox swaps
    the mount point's parent for a link to the host and back, in a loop, while 100 commands
    start (before: a directory ``b`` appeared in the host directory, 5 runs of 5)."""
    target = host_dir(tmp_path)
    disk_id = bwrap_api.data("POST", "/v1/disks", json=DISK)["id"]
    sandbox = bwrap_api.sandbox(disks=[{"disk_id": disk_id, "mount_path": "/mnt/a/b"}])
    swapper = bwrap_api.process(sandbox, "bash", "-c", (
        f"while :; do mv /mnt/a /mnt/a.old && ln -s /oldroot{target} /mnt/a; "
        "rm -f /mnt/a; mv /mnt/a.old /mnt/a; done"
    ))  # fmt: skip
    try:
        refused = 0
        for _ in range(100):
            result = run(bwrap_api, sandbox, "true")  # refused while the link is there
            refused += "mount point leads through a symlink" in result["stderr"]
            assert_untouched(target)
        assert refused > 0  # the swaps were live: some commands met the link
    finally:
        bwrap_api.call("DELETE", bwrap_api.proc_path(sandbox, swapper))
