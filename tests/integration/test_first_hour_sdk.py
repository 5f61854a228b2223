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
