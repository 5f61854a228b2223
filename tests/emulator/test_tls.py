"""The emulator over HTTPS: a real certificate check, a CA path to trust, clients that use it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from createos_sync import Client, CreateosApiError
from createos_sync.emulator import Emulator

from ..waiting import wait_until


def test_serves_https_with_a_certificate_from_its_own_ca(
    make_emu: Callable[..., Emulator],
) -> None:
    emu = make_emu(tls=True)
    assert emu.url.startswith("https://127.0.0.1:")
    assert emu.ca_path is not None and Path(emu.ca_path).is_file()
    assert requests.get(emu.url + "/healthz", verify=emu.ca_path, timeout=10).ok
    with pytest.raises(requests.exceptions.SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        requests.get(emu.url + "/healthz", verify=True, timeout=10)  # the system's CAs only
    ca_dir = Path(emu.ca_path).parent
    emu.close()
    assert not ca_dir.exists()


def test_its_client_trusts_the_ca_even_when_requests_ca_bundle_says_otherwise(
    make_emu: Callable[..., Emulator], monkeypatch: pytest.MonkeyPatch
) -> None:
    # requests would let this variable replace a session's own verify setting.
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", requests.certs.where())
    monkeypatch.setenv("CURL_CA_BUNDLE", requests.certs.where())
    emu = make_emu(tls=True)
    with emu.client() as client, client.lease() as box:
        assert box.run("echo over tls").stdout == "over tls\n"
        box.write_file("/workspace/f", b"data")
        assert box.read_file("/workspace/f") == b"data"


def test_a_client_without_the_ca_refuses_the_emulator(
    make_emu: Callable[..., Emulator],
) -> None:
    emu = make_emu(tls=True)
    client = Client(api_key=emu.api_key, base_url=emu.url, max_retries=0)
    with client, pytest.raises(CreateosApiError) as caught:
        client.shapes()
    assert caught.value.status is None
    assert emu.api_key not in str(caught.value)


def test_command_line_tls_prints_what_a_client_needs() -> None:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "createos_sync.emulator", "--tls", "--no-rate-limit",
            "--isolation", "none"]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    ) as proc:
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(4)]
            assert lines[0].startswith("CreateOS emulator listening on https://"), lines
            match = re.search(
                r"export CREATEOS_API_URL=(\S+) CREATEOS_SANDBOX_BASE_URL=\1 "
                r"CREATEOS_CA_BUNDLE=(\S+) CREATEOS_API_KEY=(\S+) CREATEOS_SANDBOX_API_KEY=\3$",
                lines[3],
            )
            assert match, lines
            url, ca_path, key = match.groups()
            assert lines[2].strip() == f"CA certificate: {ca_path}"
            env_client = {
                "CREATEOS_API_URL": url, "CREATEOS_CA_BUNDLE": ca_path, "CREATEOS_API_KEY": key,
            }  # fmt: skip
            with pytest.MonkeyPatch.context() as patch:
                for name, value in env_client.items():
                    patch.setenv(name, value)
                with Client() as client:
                    assert client.shapes()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=20) == 0
            assert not Path(ca_path).exists()
        finally:
            if proc.poll() is None:
                proc.kill()


def test_the_ca_directory_goes_even_when_the_emulator_is_killed() -> None:
    argv = [sys.executable, "-m", "createos_sync.emulator", "--tls", "--no-rate-limit",
            "--isolation", "none"]  # fmt: skip
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline() for _ in range(3)]
            assert lines[2].startswith("CA certificate: "), lines
            ca_dir = Path(lines[2].split(": ", 1)[1].strip()).parent
            assert ca_dir.is_dir()
            proc.send_signal(signal.SIGKILL)  # no cleanup code runs: the janitor removes it
            proc.wait(timeout=20)
            wait_until(lambda: not ca_dir.exists(), "the CA's directory to be removed")
        finally:
            if proc.poll() is None:
                proc.kill()
