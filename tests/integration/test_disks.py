"""Persistent disks end to end: a file one sandbox writes to a disk, the next one reads."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator, Fault

from .helpers import operations


@pytest.fixture
def disk(client: Client) -> Iterator[cs.Disk]:
    made = client.create_disk(
        "test-cache", bucket="ci", endpoint="https://s3.example.com",
        access_key="AKIAEXAMPLE", secret_key="wJalrXUtnFEMI-SECRET",
    )  # fmt: skip
    yield made
    client.delete_disk(made)


def test_a_file_written_to_a_disk_is_read_by_the_next_sandbox(
    client: Client, disk: cs.Disk
) -> None:
    with client.lease(disks={"/mnt/cache": disk}) as first:
        first.run("mkdir -p /mnt/cache/pip && echo cached > /mnt/cache/pip/wheel", check=True)
    with client.lease(disks={"/mnt/cache": "test-cache"}) as second:  # by name: looked up
        assert second.run("cat /mnt/cache/pip/wheel", check=True).stdout == "cached\n"
        assert second.read_file("/mnt/cache/pip/wheel") == b"cached\n"  # the files API too
        [mount] = second.disks()
        assert (mount.disk_id, mount.mount_path, mount.status) == (disk.id, "/mnt/cache", "mounted")


def test_attach_and_detach_on_a_running_sandbox_with_a_sub_path(
    client: Client, disk: cs.Disk, emulator: Emulator
) -> None:
    with client.lease() as box:
        emulator.clear_request_log()
        box.attach_disk(disk, "/data", sub_path="job-1")
        assert operations(emulator) == [("disk.attach", 200)]  # 1 request
        box.write_file("/data/out.txt", b"result")
        emulator.clear_request_log()
        assert box.detach_disk(disk, "/data") is True
        assert operations(emulator) == [("disk.detach", 200)]
        assert box.disks() == []
        assert box.detach_disk(disk, "/data") is False  # not mounted there any more
        box.attach_disk(disk.id, "/again")
        assert box.run("cat /again/job-1/out.txt").stdout == "result"


def test_close_detaches_what_the_lease_attached_before_it_destroys(
    client: Client, disk: cs.Disk, emulator: Emulator
) -> None:
    box = client.lease(disks={"/mnt/a": disk}, ttl=None).open()
    box.attach_disk(disk, "/mnt/b")
    emulator.clear_request_log()
    box.close()
    assert operations(emulator) == [
        ("disk.detach", 200),
        ("disk.detach", 200),
        ("sandbox.delete", 200),
    ]


def test_a_detach_that_fails_at_close_is_reported_and_the_sandbox_still_destroyed(
    client: Client, disk: cs.Disk, emulator: Emulator
) -> None:
    box = client.lease(disks={"/mnt/a": disk}, ttl=None).open()
    emulator.faults.add(Fault("disk.detach", status=500, times=10))
    with pytest.raises(cs.CreateosCleanupError, match="not detached") as caught:
        box.close()
    assert caught.value.sandbox_destroyed is True
    assert box.id not in emulator.live_sandboxes()


def test_disk_arguments_are_checked_before_any_request(client: Client, emulator: Emulator) -> None:
    emulator.clear_request_log()
    with pytest.raises(ValueError, match="disk name"):
        client.create_disk("Bad_Name", bucket="b", endpoint="https://s3", access_key="a",
                           secret_key="s")  # fmt: skip
    with pytest.raises(ValueError, match="secret_key") as caught:
        client.create_disk("ok", bucket="b", endpoint="https://s3", access_key="a",
                           secret_key="has space")  # fmt: skip
    assert "has space" not in str(caught.value)
    with pytest.raises(ValueError, match="mount_path"):
        client.lease(disks={"relative": "ok"})
    with pytest.raises(ValueError, match="mount_path"):
        client.lease(disks={"/proc/x": "ok"})
    with pytest.raises(ValueError, match="fork"):
        client.lease(fork_from="sb-1", disks={"/mnt": "ok"})
    assert emulator.request_log == []


def test_credentials_never_show(client: Client, disk: cs.Disk, emulator: Emulator) -> None:
    assert "SECRET" not in repr(disk) and "AKIA" not in repr(disk)
    emulator.faults.add(Fault("disk.rotate", status=400, message="bad key wJalrXUtnFEMI-SECRET"))
    with pytest.raises(cs.CreateosApiError) as caught:
        client.rotate_disk_credentials(disk, access_key="AKIA2", secret_key="wJalrXUtnFEMI-SECRET")
    assert "SECRET" not in str(caught.value)
    rotated = client.rotate_disk_credentials(disk, access_key="AKIA2", secret_key="new-secret")
    assert rotated.id == disk.id and client.disk(disk.id) == rotated
