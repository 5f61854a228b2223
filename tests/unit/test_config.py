"""Configuration: precedence, validation, and never showing the key."""

from __future__ import annotations

import inspect
from pathlib import Path

import attrs
import pytest
import requests

from createos_sync import Client, ConfigError
from createos_sync.client import client_for
from createos_sync.config import Config, is_loopback, service_key


def test_environment_fallbacks_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CREATEOS_API_KEY", "k-env")
    monkeypatch.setenv("CREATEOS_SANDBOX_BASE_URL", "https://second.test")
    assert Config.resolve().base_url == "https://second.test"
    monkeypatch.setenv("CREATEOS_API_URL", "https://first.test")
    assert Config.resolve().base_url == "https://first.test"
    assert Config.resolve(base_url="https://arg.test").base_url == "https://arg.test"
    assert Config.resolve().api_key == "k-env"
    assert Config.resolve("k-arg").api_key == "k-arg"


def test_default_base_url() -> None:
    assert Config.resolve("k").api_root == "https://api.sb.createos.sh/v1"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://api.test/v1", "https://api.test"),
        ("https://api.test/v1/", "https://api.test"),
        ("https://api.test/", "https://api.test"),
        ("https://api.test:8443/proxy/v1", "https://api.test:8443/proxy"),
        ("http://localhost:8080", "http://localhost:8080"),
        ("http://127.0.0.1:9/v1", "http://127.0.0.1:9"),
        ("http://[::1]:9", "http://[::1]:9"),
    ],
)
def test_base_url_normalisation(url: str, expected: str) -> None:
    assert Config.resolve("k", url).base_url == expected


@pytest.mark.parametrize(
    "url",
    [
        "http://api.test",  # plain HTTP off loopback
        "https://user:pw@api.test",
        "https://api.test?x=1",
        "https://api.test#frag",
        "ftp://api.test",
        "api.test",
        "https://",
        "https://api.test:notaport",
    ],
)
def test_invalid_base_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Client("k", url)
    assert isinstance(caught.value, ValueError)
    assert "pw" not in str(caught.value)


def test_missing_key_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="CREATEOS_API_KEY") as caught:
        Client()
    assert "try it offline on the local emulator" in str(caught.value)  # a new user's way in


@pytest.mark.parametrize(
    "key",
    [
        "abc\r\nX-Evil: 1",
        "abc\n",
        "a\0b",
        "   ",
        "sk-abcключ",  # not latin-1: would fail at the first request, the key in its args
        "sk-abcé",  # latin-1, not ASCII: servers disagree on such headers
        " sk-abc",  # surrounding whitespace: stripped by servers, every request "unanswered"
        "sk-abc\t",
        "sk-abc\x7f",
    ],
)
def test_unsendable_keys_are_rejected_without_being_shown(key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Client(key, "https://api.test")
    assert isinstance(caught.value, ValueError)
    for shown in (str(caught.value), repr(caught.value.args)):
        assert "abc" not in shown and "Evil" not in shown


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive, finite number of seconds"),
        ({"timeout": float("inf")}, "timeout must be a positive, finite number of seconds"),
        ({"max_retries": -1}, "max_retries must be an integer >= 0"),
        ({"requests_per_minute": 0}, "requests_per_minute must be an integer >= 1"),
        ({"timeout": "5"}, "timeout must be a number of seconds"),
        ({"max_retries": True}, "max_retries must be an integer >= 0"),
        ({"cleanup_timeout": 0}, "cleanup_timeout must be a positive, finite number of seconds"),
        ({"cleanup_timeout": float("nan")}, "cleanup_timeout must be a positive, finite number"),
    ],
)
def test_invalid_numbers(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Client("k", "https://api.test", **kwargs)  # type: ignore[arg-type]


def test_cleanup_gets_60_seconds_unless_told_otherwise() -> None:
    """docs/explanation/containment.md's figure, as a literal: cleanup gets its own 60 s."""
    assert Client("k", "https://api.test").config.cleanup_timeout == 60.0
    shorter = Client("k", "https://api.test", cleanup_timeout=2.5)
    assert shorter._transport.config.cleanup_timeout == 2.5


def test_repr_hides_the_key() -> None:
    client = Client("super-secret-key", "https://api.test")
    assert "super-secret-key" not in repr(client)
    assert "super-secret-key" not in repr(client.config)


def test_ca_bundle_from_argument_then_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first, second = tmp_path / "a.pem", tmp_path / "b.pem"
    first.write_text("x")
    second.write_text("y")
    assert Config.resolve("k").ca_bundle is None
    monkeypatch.setenv("CREATEOS_CA_BUNDLE", str(second))
    assert Config.resolve("k").ca_bundle == str(second)
    assert Config.resolve("k", ca_bundle=first).ca_bundle == str(first)


def test_a_missing_ca_bundle_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        Config.resolve("k", ca_bundle=tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match="ca_bundle must be a path to a PEM file"):
        Config.resolve("k", ca_bundle=3)  # type: ignore[arg-type]


def test_ca_bundle_and_own_session_exclude_each_other(tmp_path: Path) -> None:
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    with pytest.raises(ConfigError, match="not both"):
        Client("k", ca_bundle=bundle, session=requests.Session())


def test_a_client_for_a_configuration_has_all_of_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # cs.map's workers and the pytest plugin's leak check rebuild clients this way: an HTTPS
    # emulator's CA (or any other setting) must not be lost on the way.
    monkeypatch.delenv("CREATEOS_CA_BUNDLE", raising=False)
    bundle = tmp_path / "ca.pem"
    bundle.write_text("x")
    config = Client(
        "k",
        "https://api.test",
        timeout=12.0,
        max_retries=1,
        requests_per_minute=60,
        rate_scope="process",
        ca_bundle=bundle,
        cleanup_timeout=7.5,  # lost on the way before issue 39: its keywords were listed twice
    ).config
    assert client_for(config).config == config


def test_configs_fields_are_the_clients_settings() -> None:
    """``client_for`` passes a ``Config``'s fields as ``Client``'s keywords: one list."""
    settings = set(inspect.signature(Client).parameters) - {"session", "sleep"}
    assert settings == {field.name for field in attrs.fields(Config)}


@pytest.mark.parametrize(
    "spelling",
    [
        "http://localhost:8080",
        "http://LOCALHOST:8080/",
        "http://127.0.0.1:8080/v1",
        "http://[::1]:8080/v1/",
    ],
)
def test_the_service_key_is_the_same_for_every_spelling_of_one_url(spelling: str) -> None:
    """Issue 22: the lease journal's claims and reap's choice of entries use this key."""
    assert service_key(spelling) == service_key("http://127.0.0.1:8080")


def test_the_service_key_drops_a_default_port_and_keeps_other_services_apart() -> None:
    assert service_key("https://API.example.com:443/v1") == service_key("https://api.example.com")
    assert service_key("https://api.example.com") != service_key("https://api.example.org")
    assert service_key("http://127.0.0.1:8080") != service_key("http://127.0.0.1:8081")


# --- the loopback rule (one definition: config.is_loopback) -------------------


@pytest.mark.parametrize(
    "host",
    ["localhost", "LocalHost", "127.0.0.1", "127.0.0.2", "127.255.255.254", "127.1.2.3", "::1"],
)
def test_loopback_is_localhost_127_0_0_0_8_and_ipv6_one(host: str) -> None:
    assert is_loopback(host)


@pytest.mark.parametrize(
    "host",
    [
        "localhost.example.com",  # names that only look local
        "127.0.0.1.nip.io",
        "localhost.",
        "my-localhost",
        "127.1",  # a shorthand the resolver would expand: not written as an address
        "0x7f.0.0.1",
        "::ffff:127.0.0.1",  # IPv4-mapped: Python's own answer changed in 3.13
        "128.0.0.1",
        "10.0.0.1",
        "0.0.0.0",
        "::",
        "",
    ],
)
def test_names_that_only_look_local_are_not_loopback(host: str) -> None:
    assert not is_loopback(host)


@pytest.mark.parametrize(
    "url", ["http://127.0.0.2:8080", "http://LOCALHOST:9", "http://[::1]:9/v1", "http://127.9.9.9"]
)
def test_a_client_takes_plain_http_to_every_loopback_host(url: str) -> None:
    assert Client("k", url).config.base_url.startswith("http://")


@pytest.mark.parametrize(
    "url",
    ["http://localhost.example.com", "http://127.0.0.1.nip.io:80", "http://[::ffff:127.0.0.1]"],
)
def test_a_client_refuses_plain_http_to_names_that_only_look_local(url: str) -> None:
    with pytest.raises(ConfigError, match="plain HTTP is only allowed to a loopback host"):
        Client("k", url)


def test_127_0_0_2_is_another_service_than_127_0_0_1() -> None:
    assert service_key("http://127.0.0.2:8080") != service_key("http://127.0.0.1:8080")
    assert service_key("http://localhost:8080") == service_key("http://127.0.0.1:8080")


def test_the_official_clients_key_name_is_read_after_ours() -> None:
    env = {"CREATEOS_SANDBOX_API_KEY": "k-official", "CREATEOS_SANDBOX_BASE_URL": "http://[::1]:9"}
    config = Config.resolve(environ=env)
    assert (config.api_key, config.base_url) == ("k-official", "http://[::1]:9")
    config = Config.resolve(environ={**env, "CREATEOS_API_KEY": "k-ours", "CREATEOS_API_URL": ""})
    assert config.api_key == "k-ours"
    with pytest.raises(ConfigError, match="no API key"):
        Config.resolve(environ={"CREATEOS_SANDBOX_API_KEY": "  "})
