"""Client configuration, resolved once: explicit argument, then environment, then default."""

from __future__ import annotations

import errno
import ipaddress
import math
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, TypeVar
from urllib.parse import urlsplit

import attrs

from .errors import ConfigError

Made = TypeVar("Made")

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

# The spellings of this machine's default loopback host: one service, whichever is written.
# (127.0.0.2 is loopback too, but another address: a service there is another one.)
_LOOPBACK_SPELLINGS = frozenset({"localhost", "127.0.0.1", "::1"})


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


def is_loopback(host: str) -> bool:
    """The loopback rule, the package's only one: ``localhost`` (any case), an address
    of 127.0.0.0/8, or ``::1``.

    Plain HTTP is allowed to these hosts only (base URLs, preview URLs), and
    ``reap`` probes only these. A name that merely looks local
    (``localhost.example.com``, ``127.0.0.1.nip.io``) is not one, nor is an
    IPv4-mapped address (``::ffff:127.0.0.1``: Python's own answer for it
    changed in 3.13), nor a shorthand such as ``127.1``.
    """
    if host.lower() == "localhost":
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return False
    return address.is_loopback


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
    if parts.scheme == "http" and not is_loopback(host):
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
    if host in _LOOPBACK_SPELLINGS:
        host = "loopback"
    if port == {"https": 443, "http": 80}[parts.scheme]:
        port = None
    netloc = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{netloc}{f':{port}' if port is not None else ''}{parts.path}"


def positive_seconds(name: str, value: object, *, none_too: bool = False) -> float:
    """The rule of every duration the package takes: a positive, finite number of seconds
    (``TypeError``, ``ValueError`` otherwise; ``Client``'s own are ``ConfigError``).
    ``none_too``: the message says that None is taken too (the caller handles it)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of seconds{' or None' if none_too else ''}")
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a positive, finite number of seconds")
    return float(value)


def _positive_seconds(name: str, value: float) -> float:
    try:
        return positive_seconds(name, value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


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


def new_beside(target: str, suffix: str, make: Callable[[str], Made]) -> tuple[str, Made]:
    """``make(path)`` for a new random name beside ``target`` (``.NAME.RANDOM<suffix>``),
    and that path: the one way this package names a temporary file or directory that
    will replace or become ``target``. ``make`` creates exclusively (``O_EXCL``,
    ``mkdir``): a name that exists raises ``FileExistsError`` and another is drawn.
    Not ``tempfile``: see ``_sandboxes.journal`` for the Ctrl-C that hung it.
    """
    parent, name = os.path.split(target)
    for _ in range(100):
        path = os.path.join(parent, f".{name}.{secrets.token_hex(4)}{suffix}")
        try:
            return path, make(path)
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def lock_record(fd: int, patience: float) -> bool:
    """Take the POSIX record lock (``lockf``) of ``fd``; False if another process still
    held it after ``patience`` seconds.

    A record lock, not ``flock``: the kernel drops it when its holder dies (SIGKILL
    included), and a child forked while it is held does not inherit it. Tried without
    blocking, with naps growing from 50 us to 5 ms: a blocking ``lockf`` would wait for
    ever on a holder that lives but is stopped (SIGSTOP, a debugger). Contention is
    rare and short, so the first try nearly always wins. POSIX only: the callers take
    no record lock where ``fcntl`` is missing (Windows).
    """
    import fcntl  # here: on Windows, importing this module must work

    give_up = time.monotonic() + patience
    nap = 50e-6
    while True:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
        if time.monotonic() >= give_up:
            return False
        time.sleep(nap)
        nap = min(nap * 2, 5e-3)
