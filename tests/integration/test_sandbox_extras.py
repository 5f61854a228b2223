"""Disk growth, SSH keys, bandwidth, and a sandbox found by its ip."""

from __future__ import annotations

import pytest

from createos_sync import Client
from createos_sync.emulator import Emulator

from .helpers import operations

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHJlYWRlcnMgb2YgdGhlIHRlc3Q user@laptop"
KEY2 = "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQC7 ci"


def test_grow_disk_ssh_keys_bandwidth_and_lookup_by_ip(client: Client, emulator: Emulator) -> None:
    with client.lease(ssh_keys=[KEY]) as box:
        emulator.clear_request_log()
        size = box.info().disk_mib or 0
        assert box.grow_disk(size + 512) == size + 512
        with pytest.raises(ValueError, match="only grow"):
            box.grow_disk(size)  # before any request
        assert box.add_ssh_keys([KEY2]) == 2  # the one given at creation, and this one
        quota = box.bandwidth()
        assert quota.used_bytes == 0 and quota.quota_bytes
        assert box.recharge_bandwidth(1000).quota_bytes == quota.quota_bytes + 1000
        ip = box.info().ip
        assert ip and client.sandbox_by_ip(ip).id == box.id
        assert [op for op, _ in operations(emulator)] == [
            "sandbox.get", "sandbox.resize", "sandbox.ssh_keys", "sandbox.bandwidth",
            "sandbox.recharge", "sandbox.get", "sandbox.by_ip",
        ]  # fmt: skip
        assert box.info().disk_mib == size + 512
    with pytest.raises(ValueError, match="every ssh key must be one OpenSSH public key line"):
        client.lease(ssh_keys=["not a key"])
