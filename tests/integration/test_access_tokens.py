"""Sandbox access tokens end to end: a token drives its sandbox, and nothing else."""

from __future__ import annotations

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator

from .helpers import FAST, operations


def test_a_token_drives_its_sandbox_and_is_refused_for_another(
    client: Client, emulator: Emulator
) -> None:
    with client.lease() as mine, client.lease() as other:
        emulator.clear_request_log()
        token = mine.create_access_token()
        assert operations(emulator) == [("token.create", 200)]  # 1 request
        assert repr(token) == "AccessToken('***')" and token not in repr(mine.access_token_info())
        with Client(api_key=token, base_url=emulator.url, requests_per_minute=FAST) as delegated:
            with delegated.lease(sandbox_id=mine.id) as box:
                assert box.run("echo driven by a token").stdout == "driven by a token\n"
                box.write_file("/workspace/t.txt", b"ok")
                # It may read its own token's state (never the secret), not make another.
                assert box.access_token_info().enabled
                with pytest.raises(cs.CreateosApiError, match="cannot manage tokens"):
                    box.rotate_access_token()
            with pytest.raises(
                cs.CreateosApiError, match="HTTP 404 during sandbox lifecycle"
            ) as refused:
                delegated.lease(sandbox_id=other.id).open()
            assert refused.value.status == 404  # as the service answers: not yours
            with pytest.raises(
                cs.CreateosApiError, match="HTTP 403 during sandbox listing"
            ) as account_wide:
                delegated.sandboxes()
            assert account_wide.value.status == 403
        assert mine.read_file("/workspace/t.txt") == b"ok"


def test_rotate_invalidates_the_old_token_and_disable_the_new_one(
    client: Client, emulator: Emulator
) -> None:
    with client.lease() as box:
        old = box.create_access_token()
        new = box.rotate_access_token()
        assert new != old
        info = box.access_token_info()
        assert (
            info.enabled
            and info.rotated_at is not None
            and info.hint
            and new.endswith(info.hint[-4:])
        )
        with Client(api_key=old, base_url=emulator.url, requests_per_minute=FAST) as stale:
            with pytest.raises(
                cs.CreateosApiError, match="HTTP 401 during sandbox lifecycle"
            ) as caught:
                stale.sandbox(box.id)
            assert caught.value.status == 401
        with Client(api_key=new, base_url=emulator.url, requests_per_minute=FAST) as fresh:
            assert fresh.sandbox(box.id).id == box.id
            box.disable_access_token()
            with pytest.raises(cs.CreateosApiError, match="HTTP 401 during sandbox lifecycle"):
                fresh.sandbox(box.id)
        assert box.access_token_info().enabled is False


def test_a_lease_that_keeps_its_sandbox_disables_the_token_it_made(
    client: Client, emulator: Emulator
) -> None:
    box = client.lease(on_exit="keep", ttl=None).open()
    token = box.create_access_token()
    emulator.clear_request_log()
    box.close()
    assert operations(emulator) == [("token.delete", 200)]  # 1 request, and nothing destroyed
    try:
        gone = Client(api_key=token, base_url=emulator.url, requests_per_minute=FAST)
        with gone, pytest.raises(cs.CreateosApiError, match="HTTP 401 during sandbox lifecycle"):
            gone.sandbox(box.id or "")
    finally:
        client.destroy(box.id or "")


def test_a_lease_that_destroys_its_sandbox_sends_nothing_for_the_token(
    client: Client, emulator: Emulator
) -> None:
    box = client.lease(ttl=None).open()
    box.create_access_token()
    emulator.clear_request_log()
    box.close()
    assert operations(emulator) == [("sandbox.delete", 200)]


def test_no_token_or_disk_key_reaches_a_state_file(
    client: Client, emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    from createos_sync.config import state_dir

    caplog.set_level("DEBUG")
    disk = client.create_disk("state-check", bucket="b", endpoint="https://s3.example.com",
                              access_key="AKIA-STATE", secret_key="KEY-IN-NO-FILE")  # fmt: skip
    try:
        with client.lease(disks={"/mnt/d": disk}) as box:
            token = box.create_access_token()
            written = b"".join(
                p.read_bytes() for p in state_dir().rglob("*") if p.is_file()
            )  # the lease journal and the request budget's files, while the lease is open
            assert (box.id or "-").encode() in written  # the journal was read
            assert token.encode() not in written and b"KEY-IN-NO-FILE" not in written
    finally:
        client.delete_disk(disk)
    assert token not in caplog.text and "KEY-IN-NO-FILE" not in caplog.text


def test_a_client_manages_the_token_of_a_sandbox_it_names(
    client: Client, emulator: Emulator
) -> None:
    """``Client``'s token methods, by sandbox id (what ``createos-sync token`` uses)."""
    with client.lease() as box:
        emulator.clear_request_log()
        token = client.create_access_token(box.id)
        new = client.rotate_access_token(box.id)
        client.disable_access_token(box.id)
        assert operations(emulator) == [  # 1 request each
            ("token.create", 200),
            ("token.rotate", 200),
            ("token.delete", 200),
        ]
        assert repr(token) == "AccessToken('***')" and new != token
        assert not box.access_token_info().enabled
    with pytest.raises(ValueError, match="sandbox_id must be a non-empty str"):
        client.create_access_token("")
