"""What a new user's first hour with the Python SDK tripped on (issue 37), against the
session emulator."""

from __future__ import annotations

import pytest

import createos_sync as cs
from createos_sync import Client
from createos_sync.emulator import Emulator


def test_an_unknown_rootfs_is_refused_with_the_catalog_s_names(
    emulator: Emulator, client: Client
) -> None:
    emulator.clear_request_log()
    with pytest.raises(
        cs.CreateosApiError,
        match=r"HTTP 400 during sandbox creation[^:]*: unknown rootfs 'ubuntu:24\.04' "
        r"\(did you mean 'ubuntu-24\.04'\?\): the root file systems are .*ubuntu-24\.04.* "
        r"\(or give a ready template's id\)",
    ):
        client.lease(rootfs="ubuntu:24.04").open()
    paths = [(r.method, r.path) for r in emulator.request_log]
    assert paths[-2:] == [("POST", "/v1/sandboxes"), ("GET", "/v1/rootfs")]  # 1 more, then


def test_a_lease_answers_to_id_and_sandbox_id(client: Client) -> None:
    with client.lease() as box:
        assert box.id is not None and box.sandbox_id == box.id
        with client.lease(sandbox_id=box.sandbox_id) as again:
            assert again.sandbox_id == box.id


def test_errors_name_the_sandbox_and_the_next_step(emulator: Emulator, client: Client) -> None:
    with pytest.raises(cs.CreateosApiError, match=r"no sandbox sb-nope to attach to \(check"):
        client.lease(sandbox_id="sb-nope").open()
    with client.lease() as box:
        with pytest.raises(cs.CommandFailed, match=rf"\(process \S+ in sandbox {box.id}\)"):
            box.run("exit 3", check=True)
        with pytest.raises(
            cs.CreateosApiError,
            match=rf"HTTP 403 during file transfer.*: sandbox {box.id} refused to write /proc/x",
        ):
            box.write_file("/proc/x", b"1")
    with pytest.raises(cs.LeaseClosed, match=rf"closed \(sandbox {box.id}\): .*open a new one"):
        box.run("true")


def test_a_rejected_key_is_raised_without_the_retry_machinery_s_frames(
    emulator: Emulator,
) -> None:
    import traceback

    with (
        cs.Client("k-wrong-0123456789", emulator.url) as wrong,
        pytest.raises(cs.CreateosApiError, match="the API key was rejected") as caught,
    ):
        wrong.lease().open()
    frames = traceback.extract_tb(caught.value.__traceback__)
    modules = {frame.filename for frame in frames}
    assert not [m for m in modules if "tenacity" in m or "concurrent" in m], modules
    assert caught.value.__cause__ is None and caught.value.__context__ is None
