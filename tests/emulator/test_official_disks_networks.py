"""The official client's flows for disks, networks, access tokens and the sandbox extras,
unchanged, against the emulator (see ``test_official_sdk``)."""

from __future__ import annotations

import createos
import pytest
from createos import (
    AttachDiskOptions,
    CreateSandboxRequest,
    DetachDiskOptions,
    DiskConfig,
    DiskCreateRequest,
    DiskCredentials,
    NetworkCreateRequest,
    RunCommandRequest,
    SandboxInstance,
    WaitOptions,
)

WAIT = WaitOptions(timeout=30.0)
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHJlYWRlcnMgb2YgdGhlIHRlc3Q user@laptop"


def _sandbox(official: createos.Client, **fields: object) -> SandboxInstance:
    sandbox = official.create_sandbox(CreateSandboxRequest(shape="s-1vcpu-1gb", **fields))
    return sandbox.wait_until_running(WAIT)


def _shell(sandbox: SandboxInstance, script: str) -> str:
    response = sandbox.run_command(RunCommandRequest(command="bash", arguments=["-c", script]))
    return str(response.result.standard_output)


def test_disk_registration_mount_and_persistence(official: createos.Client) -> None:
    disk = official.disks.create(
        DiskCreateRequest(
            name="datasets",
            config=DiskConfig(bucket="ml", endpoint="https://s3.example.com", region="eu-1"),
            credentials=DiskCredentials(access_key="AKIA1", secret_key="s3cr3t"),
        )
    )
    assert disk.id.startswith("disk_") and official.disks.get("datasets").id == disk.id
    assert [d.name for d in official.disks.list()] == ["datasets"]
    first = _sandbox(official)
    try:
        first.attach_disk(AttachDiskOptions(disk_id=disk.id, mount_path="/mnt/ds"))
        assert [d.mount_status for d in first.list_disks()] == ["mounted"]
        _shell(first, "echo kept > /mnt/ds/file")
        assert first.detach_disk(DetachDiskOptions(disk_id=disk.id, mount_path="/mnt/ds"))
    finally:
        first.destroy()
    second = _sandbox(official)
    try:
        second.attach_disk(AttachDiskOptions(disk_id=disk.id, mount_path="/data"))
        assert _shell(second, "cat /data/file") == "kept\n"
    finally:
        second.destroy()
        second.wait_until_destroyed(WAIT)
    official.disks.rotate_credentials("datasets", DiskCredentials("AKIA2", "other"))
    assert official.disks.delete(disk.id) is True


def test_networks_members_and_delete(official: createos.Client) -> None:
    network = official.networks.create(NetworkCreateRequest(name="mesh"))
    a, b = _sandbox(official), _sandbox(official)
    try:
        a.attach_network(network.id)
        b.attach_network(network.id)
        members = {m.sandbox_id: m.ip_address for m in official.networks.get(network.id).members}
        assert set(members) == {a.id, b.id} and all(members.values())
        b.detach_network(network.id)
        assert [m.sandbox_id for m in official.networks.get(network.id).members] == [a.id]
    finally:
        for sandbox in (a, b):
            sandbox.destroy()
            sandbox.wait_until_destroyed(WAIT)
    assert [n.id for n in official.networks.list()] == [network.id]


def test_access_tokens_and_the_extras(official: createos.Client) -> None:
    sandbox = _sandbox(official, ssh_public_keys=[KEY])
    other = _sandbox(official)
    try:
        created = sandbox.create_access_token()
        assert created.enabled and created.token not in repr(created)
        delegated = sandbox.with_access_token(created.token)
        assert delegated.refresh().id == sandbox.id
        with pytest.raises(createos.APIError) as foreign:
            other.with_access_token(created.token).refresh()
        assert foreign.value.status_code == 404
        rotated = sandbox.rotate_access_token()
        with pytest.raises(createos.APIError) as stale:
            delegated.refresh()
        assert stale.value.status_code == 401
        assert sandbox.get_access_token().token_hint.endswith(rotated.token[-4:])
        assert sandbox.disable_access_token().enabled is False
        assert sandbox.resize(sandbox.data.disk_mib + 256).disk_mib == sandbox.data.disk_mib
        assert sandbox.add_ssh_public_keys([KEY]) == 1
        quota = sandbox.bandwidth()
        assert sandbox.recharge_bandwidth(10).quota_bytes == quota.quota_bytes + 10
        assert official.get_sandbox_by_ip(sandbox.ip_address).id == sandbox.id
    finally:
        for box in (sandbox, other):
            box.destroy()
