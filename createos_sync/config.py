"""Client configuration, resolved once: explicit argument, then environment, then default."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import attrs

from .errors import ConfigError

DEFAULT_BASE_URL = "https://api.sb.createos.sh"
DEFAULT_SHAPE = "s-1vcpu-1gb"
API_KEY_ENV = "CREATEOS_API_KEY"
# Ours first, then the names the official clients read: either family configures both.
API_KEY_ENVS = (API_KEY_ENV, "CREATEOS_SANDBOX_API_KEY")
BASE_URL_ENVS = ("CREATEOS_API_URL", "CREATEOS_SANDBOX_BASE_URL")
SHAPE_ENV = "CREATEOS_SHAPE"
RATE_SCOPES = ("machine", "process")
RateScope = Literal["machine", "process"]
CA_BUNDLE_ENV = "CREATEOS_CA_BUNDLE"
STATE_DIR_ENV = "CREATEOS_SYNC_STATE_DIR"

_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class Secret(str):
    """A credential (an access token, a disk's keys): a ``str`` whose repr never shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"{type(self).__name__}('***')"


class ApiKey(str):
    """The API key: a ``str`` whose repr never shows it.

    Tracebacks rendered with their locals (``pytest -l``, rich, error
    trackers) show the repr of every local of every frame: a header dict or
    a config value holding the key must not give it away there.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "ApiKey('***')"


@attrs.frozen
class Config:
    """Validated settings of one client. The key never appears in the repr."""

    api_key: ApiKey = attrs.field(repr=False, converter=ApiKey)
    base_url: str
    timeout: float = 300.0
    max_retries: int = 3
    requests_per_minute: int = 300
    cleanup_timeout: float = 60.0
    # "machine": the budget is shared by every process of this machine; "process": by this one.
    rate_scope: RateScope = "machine"
    ca_bundle: str | None = None

    @property
    def api_root(self) -> str:
        """The URL every endpoint path is appended to."""
        return self.base_url + "/v1"

    @classmethod
    def resolve(
        cls,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 300.0,
        max_retries: int = 3,
        requests_per_minute: int = 300,
        rate_scope: RateScope = "machine",
        ca_bundle: str | os.PathLike[str] | None = None,
        cleanup_timeout: float = 60.0,
        environ: Mapping[str, str] | None = None,
    ) -> Config:
        """Build a config from arguments and the environment; raise ConfigError if invalid.

        ``api_key`` falls back to ``CREATEOS_API_KEY``, then
        ``CREATEOS_SANDBOX_API_KEY`` (the official clients' name); ``base_url``
        to ``CREATEOS_API_URL``, then ``CREATEOS_SANDBOX_BASE_URL``, then the
        public service. ``timeout`` (seconds), ``max_retries``,
        ``requests_per_minute``, ``rate_scope``, ``ca_bundle`` (else
        ``CREATEOS_CA_BUNDLE``) and ``cleanup_timeout`` are those of ``Client``.
        ``environ`` replaces ``os.environ`` as the environment read (for tests).
        """
        env = os.environ if environ is None else environ
        key = api_key if api_key is not None else env_api_key(env)
        url = base_url if base_url is not None else env_base_url(env)
        return cls(
            api_key=validate_api_key(key),
            base_url=normalize_base_url(url),
            timeout=_positive_seconds("timeout", timeout),
            max_retries=_count("max_retries", max_retries, minimum=0),
            requests_per_minute=_count("requests_per_minute", requests_per_minute, minimum=1),
            rate_scope=_rate_scope(rate_scope),
            cleanup_timeout=_positive_seconds("cleanup_timeout", cleanup_timeout),
            ca_bundle=validate_ca_bundle(
                ca_bundle if ca_bundle is not None else env.get(CA_BUNDLE_ENV) or None
            ),
        )


def env_api_key(environ: Mapping[str, str] | None = None) -> str | None:
    """The API key the environment gives (``CREATEOS_API_KEY``, then
    ``CREATEOS_SANDBOX_API_KEY``); None if neither is set to something."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in API_KEY_ENVS if env.get(name, "").strip()), None)


def env_base_url(environ: Mapping[str, str] | None = None) -> str:
    """The service URL the environment gives, else the public service's."""
    env = os.environ if environ is None else environ
    return next((env[name] for name in BASE_URL_ENVS if env.get(name)), DEFAULT_BASE_URL)


def default_shape(environ: Mapping[str, str] | None = None) -> str:
    """The shape used when a lease names none: ``CREATEOS_SHAPE``, then the default."""
    env = os.environ if environ is None else environ
    return env.get(SHAPE_ENV) or DEFAULT_SHAPE


def validate_api_key(key: str | None) -> ApiKey:
    """Return the key if it can be sent as a header value; the message never shows it.

    A header carries printable ASCII: anything else fails at the first request
    (or is silently rejected by the service), and surrounding whitespace is
    stripped by servers, so that every request would fail as if unanswered.
    """
    if key is not None and not isinstance(key, str):
        raise ConfigError("the API key must be a str")
    if key is None or not key.strip():
        raise ConfigError(
            f"no API key: pass api_key= or set {API_KEY_ENV}; or try it offline on the local "
            "emulator (createos_sync.emulator): see the README, 'Try it on a fresh machine'"
        )
    if not (key.isascii() and key.isprintable()):
        raise ConfigError(
            "the API key must be printable ASCII: it holds a character that cannot be sent "
            "in a header (non-ASCII, a control character such as CR, LF or NUL)"
        )
    if key != key.strip():
        raise ConfigError("the API key starts or ends with whitespace: remove it")
    return ApiKey(key)


def validate_ca_bundle(path: str | os.PathLike[str] | None) -> str | None:
    """The CA certificates to trust instead of the system's: a PEM file or a hashed directory."""
    if path is None:
        return None
    if not isinstance(path, (str, os.PathLike)):
        raise ConfigError("ca_bundle must be a path to a PEM file of CA certificates")
    text = os.fspath(path)
    if not text or not os.path.exists(text):
        raise ConfigError(f"ca_bundle {text!r} does not exist")
    return text


def normalize_base_url(url: str) -> str:
    """Validate a base URL and return it without a trailing ``/`` or ``/v1``."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port  # raises ValueError on a malformed port
    except ValueError:
        raise ConfigError("the base URL is not a valid URL") from None
    host = parts.hostname or ""
    if parts.scheme not in ("https", "http") or not host:
        raise ConfigError("the base URL must be an absolute http(s) URL with a host")
    if parts.scheme == "http" and host not in _LOOPBACK_HOSTS:
        raise ConfigError("plain HTTP is only allowed to a loopback host; use https")
    if parts.username is not None or parts.password is not None:
        raise ConfigError("the base URL must not contain user information")
    if parts.query or parts.fragment or url.rstrip().endswith(("?", "#")):
        raise ConfigError("the base URL must not contain a query string or a fragment")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    netloc = f"[{host}]" if ":" in host else host
    if port is not None:
        netloc += f":{port}"
    return f"{parts.scheme}://{netloc}{path}"


def service_key(base_url: str) -> str:
    """What identifies a service among base URLs that spell it differently: the key of
    every local record of it (the lease journal's claims, ``reap``'s choice of entries).

    Host case, the loopback spellings (``localhost``, ``127.0.0.1``, ``[::1]``),
    a default port and a trailing ``/`` or ``/v1`` make no difference.
    """
    try:
        parts = urlsplit(normalize_base_url(base_url))
        port = parts.port
    except (ConfigError, ValueError):
        return base_url  # not a URL this package would use: only itself matches it
    host = parts.hostname or ""
    if host in _LOOPBACK_HOSTS:
        host = "loopback"
    if port == {"https": 443, "http": 80}[parts.scheme]:
        port = None
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{netloc}{f':{port}' if port is not None else ''}{parts.path}"


def _positive_seconds(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name} must be a number of seconds")
    if not (value > 0 and math.isfinite(value)):
        raise ConfigError(f"{name} must be a positive, finite number of seconds")
    return float(value)


def _count(name: str, value: int, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}")
    return value


def _rate_scope(value: object) -> RateScope:
    if value not in RATE_SCOPES:
        raise ConfigError(f"rate_scope must be one of {', '.join(map(repr, RATE_SCOPES))}")
    return value  # type: ignore[return-value]


def state_dir() -> Path:
    """This machine's createos-sync state (the lease journal, the request budget's records)."""
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(Path.home(), ".local", "state")
    return Path(base) / "createos-sync"


def private_dir(path: Path) -> Path:
    """``path`` (and its missing parents) made; it is this user's alone (0700), whatever the
    umask: sandbox ids, names and budget records are nobody else's business."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode != 0o700 and path.stat().st_uid == os.geteuid():
        path.chmod(0o700)
    return path


def private_file(path: Path, flags: int) -> int:
    """``os.open`` of ``path``, created 0600 whatever the umask (the mode is only ever cut)."""
    return os.open(path, flags, 0o600)
