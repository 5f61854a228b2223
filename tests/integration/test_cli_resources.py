"""The CLI's disks, networks and access tokens: ``run --disk``, ``run --network``, ``token``."""

from __future__ import annotations

from createos_sync import Client
from createos_sync.emulator import Emulator

from .subprocesses import CLI, run_all


def test_run_with_a_disk_keeps_a_cache_between_runs(env: dict[str, str], client: Client) -> None:
    disk = client.create_disk("cli-cache", bucket="cli", endpoint="https://s3.example.com",
                              access_key="AK", secret_key="SK")  # fmt: skip
    try:
        (first,) = run_all(
            [*CLI, "run", "--disk", "cli-cache:/mnt/cache", "--", "echo warm > /mnt/cache/c"],
            env=env,
        )
        (second,) = run_all([*CLI, "run", "--disk", f"{disk.id}:/c", "--", "cat /c/c"], env=env)
        assert first[0] == 0 and second[:2] == (0, "warm\n")
    finally:
        client.delete_disk(disk)


def test_run_on_a_network_by_name_and_bad_specs(env: dict[str, str], client: Client) -> None:
    net = client.create_network("cli-net")
    try:
        joined, unknown, bad_disk, local, no_disk = run_all(
            [*CLI, "run", "--network", "cli-net", "--", "true"],
            [*CLI, "run", "--network", "nope", "--", "true"],
            [*CLI, "run", "--disk", "cache:relative/path", "--", "true"],
            [*CLI, "run", "--local", "--disk", "cache:/mnt", "--", "true"],
            [*CLI, "run", "--disk", "nope:/mnt", "--", "true"],
            env=env,
        )
        assert joined[0] == 0
        # One rule for whatever the account does not have: 2, one line naming it.
        assert unknown[0] == 2 and "no network is named 'nope'\n" in unknown[2]
        assert no_disk[0] == 2 and "no disk is named 'nope'\n" in no_disk[2]
        assert bad_disk[0] == 2 and "mount_path" in bad_disk[2]
        assert local[0] == 2 and "--local" in local[2]
    finally:
        client.delete_network(net)


def test_token_create_prints_the_token_once_on_stdout_only(
    env: dict[str, str], client: Client, emulator: Emulator
) -> None:
    with client.lease() as box:
        (made,) = run_all([*CLI, "token", "create", box.id or ""], env=env)
        status, stdout, stderr = made
        token = stdout.strip()
        assert status == 0 and stdout == token + "\n" and token not in stderr
        with Client(api_key=token, base_url=emulator.url) as delegated:
            assert delegated.sandbox(box.id or "").id == box.id
        (again,) = run_all([*CLI, "token", "create", box.id or ""], env=env)
        (rotated,) = run_all([*CLI, "token", "rotate", box.id or ""], env=env)
        (disabled,) = run_all([*CLI, "token", "disable", box.id or ""], env=env)
        assert again[0] == 1 and token not in again[1] + again[2]  # one exists already: 409
        assert rotated[0] == 0 and rotated[1].strip() not in ("", token)
        assert disabled == (0, "", disabled[2])
        assert not box.access_token_info().enabled
