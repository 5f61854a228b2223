"""``LeaseOptions``: every choice a lease is made with, validated once, passed around whole.

The lease's keywords are defined here once, for every surface that takes them
(``cs.lease``, ``Client.lease``, ``cs.map``): ``LeaseKeywords`` types them for
editors and mypy (``**options: Unpack[LeaseKeywords]``), ``LeaseOptions``
validates them (invalid arguments raise before any request is sent), and
``takes_lease_keywords`` shows them in each surface's signature and docstring,
so that ``help()`` lists them all. A new lease option touches this module only.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType
from typing import Any, Literal, TypedDict, TypeVar

import attrs

from .._commands.command import validate_env
from .._resources import checks as _checks
from .._resources import disks as _disks
from .._resources import networks as _networks
from ..config import default_shape, positive_seconds
from ..models import Disk, Network

OnExit = Literal["destroy", "keep", "pause"]
ON_EXIT_CHOICES = ("destroy", "keep", "pause")
DEFAULT_TTL = 900.0
MIN_TTL = 5.0
AUTO_PAUSE_RANGE = (60, 86400)


class TtlDefault(enum.Enum):
    """``ttl``'s default, named so that ``help()`` says what it is: 900 s for a sandbox the
    lease creates or forks, off when it attaches. ``ttl=...`` means the same."""

    TTL_DEFAULT = "default"

    def __repr__(self) -> str:
        return f"<TTL_DEFAULT: {DEFAULT_TTL:g} s, off when attaching>"


TTL_DEFAULT = TtlDefault.TTL_DEFAULT


def check_seconds(name: str, value: object) -> float | None:
    """A positive, finite number of seconds, or None."""
    return None if value is None else positive_seconds(name, value, none_too=True)


def check_egress(rules: object) -> tuple[str, ...] | None:
    """Egress rules: a sequence of non-empty strings (host names, ``*.`` wildcards, CIDRs)."""
    if rules is None:
        return None
    if isinstance(rules, (str, bytes, Mapping)) or not isinstance(rules, Sequence):
        raise ValueError(
            'egress must be a sequence of rule strings, e.g. ["pypi.org", "10.0.0.0/8"]'
        )
    checked = []
    for rule in rules:
        if not isinstance(rule, str) or not rule.strip():
            raise ValueError("every egress rule must be a non-empty str")
        if any(c.isspace() or not c.isprintable() for c in rule):
            raise ValueError("an egress rule must not contain spaces or control characters")
        checked.append(rule)
    return tuple(checked)


def check_auto_pause(seconds: object) -> int | None:
    """CreateOS's idle auto-pause: whole seconds in 60..86400, or None."""
    if seconds is None:
        return None
    low, high = AUTO_PAUSE_RANGE
    whole = isinstance(seconds, int) or (isinstance(seconds, float) and seconds.is_integer())
    if isinstance(seconds, bool) or not whole or not low <= seconds <= high:  # type: ignore[operator]
        raise ValueError(f"auto-pause must be whole seconds in {low}..{high}")
    return int(seconds)  # type: ignore[call-overload,no-any-return]


# The service refuses sandbox names over 22 characters (measured live by the Langflow
# backend); a lease's name is the prefix, "-" and 8 hex digits (``lease._making``).
MAX_NAME_PREFIX = 13


def _check_name(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_PREFIX:
        raise ValueError(
            f"name must be a non-empty str of at most {MAX_NAME_PREFIX} characters "
            "(the service keeps sandbox names to 22, and a unique suffix follows it)"
        )
    if not all(c.isalnum() or c in "-_." for c in value):
        raise ValueError("name may hold letters, digits, '-', '_' and '.' only")
    return value


def _nonempty(what: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or not value):
        raise ValueError(f"{what} must be a non-empty str")
    return value


def _check_shape(value: object) -> str | None:
    return _nonempty("shape", value)


def _check_rootfs(value: object) -> str | None:
    return _nonempty("rootfs", value)


def _check_region(value: object) -> str | None:
    return _nonempty("region", value)


def _check_sandbox_id(value: object) -> str | None:
    return _nonempty("sandbox_id", value)


def _check_fork_from(value: object) -> str | None:
    return _nonempty("fork_from", value)


def _check_max_lifetime(value: object) -> float | None:
    return check_seconds("max_lifetime", value)


def _check_timeout(value: object) -> float | None:
    return check_seconds("timeout", value)


def check_on_exit(value: object) -> OnExit | None:
    if value is not None and value not in ON_EXIT_CHOICES:
        raise ValueError(f"on_exit must be one of {', '.join(ON_EXIT_CHOICES)}")
    return value  # type: ignore[return-value]


def _check_ttl(value: object) -> float | TtlDefault | None:
    if value is ... or value is TTL_DEFAULT:
        return TTL_DEFAULT
    seconds = check_seconds("ttl", value)
    if seconds is not None and seconds < MIN_TTL:
        raise ValueError(f"ttl must be at least {MIN_TTL:g} seconds (or None to turn it off)")
    return seconds


def _check_flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise TypeError("journal and start_paused must be True or False")
    return value


def _check_disks(value: object) -> tuple[tuple[str, _disks.DiskRef], ...]:
    """Mount paths and the disks to mount there at creation: ``{"/mnt/data": disk}``."""
    if value is None or value == ():
        return ()
    if isinstance(value, tuple):  # already checked (``attrs.evolve`` converts again)
        value = dict(value)
    if not isinstance(value, Mapping):
        raise ValueError('disks must map mount paths to disks, e.g. {"/mnt/data": disk}')
    return tuple((_checks.mount_path(p), _disks.check_ref(d)) for p, d in value.items())


def _check_networks(value: object) -> tuple[_networks.NetworkRef, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Sequence):
        raise ValueError("networks must be a sequence of Network objects or network ids")
    return tuple(_networks.check_ref(n) for n in value)


def _check_ssh_keys(value: object) -> tuple[str, ...]:
    return () if value is None or value == () else tuple(_checks.ssh_keys(value))


def _check_ingress(value: object) -> bool | None:
    # None: not asked for (a fork keeps its source's setting; a new sandbox has none).
    if value is not None and not isinstance(value, bool):
        raise TypeError("ingress must be True, False or None")
    return value


@attrs.frozen(kw_only=True)
class LeaseOptions:
    """How a lease gets its sandbox and what it does with it at the end."""

    shape: str | None = attrs.field(default=None, converter=_check_shape)
    rootfs: str | None = attrs.field(default=None, converter=_check_rootfs)
    region: str | None = attrs.field(default=None, converter=_check_region)
    name: str | None = attrs.field(default=None, converter=_check_name)
    egress: tuple[str, ...] | None = attrs.field(default=None, converter=check_egress)
    env: Mapping[str, str] = attrs.field(factory=dict, converter=validate_env, repr=False)
    ingress: bool | None = attrs.field(default=False, converter=_check_ingress)
    auto_pause_after: int | None = attrs.field(default=None, converter=check_auto_pause)
    max_lifetime: float | None = attrs.field(default=None, converter=_check_max_lifetime)
    ttl: float | TtlDefault | None = attrs.field(default=TTL_DEFAULT, converter=_check_ttl)
    sandbox_id: str | None = attrs.field(default=None, converter=_check_sandbox_id)
    fork_from: str | None = attrs.field(default=None, converter=_check_fork_from)
    start_paused: bool = attrs.field(default=False, converter=_check_flag)
    on_exit: OnExit | None = attrs.field(default=None, converter=check_on_exit)
    timeout: float | None = attrs.field(default=None, converter=_check_timeout)
    journal: bool = attrs.field(default=True, converter=_check_flag)
    disks: tuple[tuple[str, _disks.DiskRef], ...] = attrs.field(
        default=None, converter=_check_disks
    )
    networks: tuple[_networks.NetworkRef, ...] = attrs.field(
        default=None, converter=_check_networks
    )
    ssh_keys: tuple[str, ...] = attrs.field(default=None, converter=_check_ssh_keys)

    def __attrs_post_init__(self) -> None:
        if self.sandbox_id is not None and self.fork_from is not None:
            raise ValueError("give sandbox_id (attach) or fork_from (fork), not both")
        if self.sandbox_id is not None or self.fork_from is not None:
            fixed = [k for k in ("shape", "rootfs", "region") if getattr(self, k) is not None]
            if fixed:
                raise ValueError(
                    f"{', '.join(fixed)} cannot be chosen for an existing sandbox or a fork "
                    "(a fork keeps its source's)"
                )
        if self.sandbox_id is not None and (self.egress is not None or self.env or self.ingress):
            raise ValueError(
                "egress, env and ingress apply to a new sandbox; an attached one keeps its own"
            )
        if self.fork_from is not None and self.auto_pause_after is not None:
            raise ValueError("auto_pause_after cannot be chosen for a fork (set it once it runs)")
        if (self.disks or self.networks) and not (self.creates and self.fork_from is None):
            raise ValueError(
                "disks and networks are attached to a new sandbox; for a fork or an attached "
                "one, use attach_disk() and attach_network() once it runs"
            )
        if self.ssh_keys and self.sandbox_id is not None:
            raise ValueError("ssh_keys apply to a new sandbox or a fork: use add_ssh_keys()")
        if self.start_paused and self.fork_from is None:
            raise ValueError("start_paused applies to a fork only (give fork_from)")

    @property
    def creates(self) -> bool:
        """Whether the lease makes its sandbox (a creation or a fork) rather than attach."""
        return self.sandbox_id is None

    @property
    def effective_on_exit(self) -> OnExit:
        return self.on_exit or ("destroy" if self.creates else "keep")

    @property
    def effective_ttl(self) -> float | None:
        if self.ttl is TTL_DEFAULT:
            return DEFAULT_TTL if self.creates else None
        return self.ttl

    def creation_body(self) -> dict[str, Any]:
        """The ``POST /sandboxes`` fields these options ask for (the unique name aside)."""
        body: dict[str, Any] = {
            "shape": self.shape or default_shape(),
            "rootfs": self.rootfs,
            "region": self.region,
            "egress": list(self.egress) if self.egress is not None else None,
            "envs": dict(self.env) or None,
            "ingress_enabled": self.ingress or None,
            "auto_pause_after_seconds": self.auto_pause_after,
            "ssh_pubkeys": list(self.ssh_keys) or None,
        }
        return {k: v for k, v in body.items() if v is not None}

    def fork_body(self) -> dict[str, Any]:
        """The ``POST /sandboxes/{id}/fork`` fields these options ask for.

        The service takes no name on a fork (the name stays in the local
        journal); what is not given is the source's (ingress None, egress None).
        """
        body: dict[str, Any] = {
            "start_paused": self.start_paused or None,
            "egress": list(self.egress) if self.egress is not None else None,
            "envs": dict(self.env) or None,
            "ingress_enabled": self.ingress,
            "ssh_pubkeys": list(self.ssh_keys) or None,
        }
        return {k: v for k, v in body.items() if v is not None}


class LeaseKeywords(TypedDict, total=False):
    """The keywords of ``cs.lease``, ``Client.lease`` and ``cs.map`` (``shape`` aside)."""

    rootfs: str | None
    region: str | None
    name: str | None
    egress: Sequence[str] | None
    env: Mapping[str, str] | None
    ingress: bool | None
    auto_pause_after: int | None
    max_lifetime: float | None
    ttl: float | TtlDefault | EllipsisType | None
    sandbox_id: str | None
    fork_from: str | None
    start_paused: bool
    on_exit: OnExit | None
    timeout: float | None
    journal: bool
    disks: Mapping[str, Disk | str] | None
    networks: Sequence[Network | str] | None
    ssh_keys: Sequence[str] | None


KEYWORDS_DOC = """\
Lease keywords (the same for ``cs.lease``, ``Client.lease`` and ``cs.map``):
    shape: the machine shape; falls back to ``CREATEOS_SHAPE``, then
        ``"s-1vcpu-1gb"``.
    rootfs: a root file system of the service's catalog (``"ubuntu-24.04"``;
        one it does not know is refused with the list of its names) or a
        ready template's id.
    region: where to place the sandbox (the service chooses by default).
    name: a prefix of at most 13 characters; the sandbox's name is it plus a
        unique suffix.
    egress: outbound rules (``["pypi.org", "*.github.com", "10.0.0.0/8"]``);
        None allows everything.
    env: variables of the sandbox (fixed at creation).
    ingress: make the sandbox's ports reachable by preview URLs.
    auto_pause_after: CreateOS's idle auto-pause, whole seconds in 60..86400.
    max_lifetime: seconds after which a timer closes the lease.
    ttl: the dead man's switch: seconds without renewal after which the
        sandbox deletes itself (default 900 for a sandbox this lease
        creates or forks, off when attaching; None turns it off).
    sandbox_id: attach to this existing sandbox (resumed if paused).
    fork_from: make the sandbox a fork of this one (running or paused), with
        a copy of its disk; the lease owns the fork, never the source.
        ``egress`` and ``env`` are then the fork's (None: the source's), and
        ``ingress`` is sent as given (None keeps the source's).
    start_paused: with ``fork_from``, the fork starts paused and the lease
        opens on it paused (``run()`` raises until ``resume()``).
    on_exit: ``"destroy"`` (default for a created or forked sandbox),
        ``"keep"`` (default when attaching) or ``"pause"``.
    timeout: the deadline of one operation and the default command timeout
        (default: the client's ``timeout``).
    journal: record the sandbox in the local lease journal (the crash-safety
        record ``createos-sync reap`` works from) before it is created; if
        the journal cannot be written, ``open()`` raises ``ConfigError``
        before any request. ``False`` (or ``CREATEOS_SYNC_JOURNAL=off`` in
        the environment) opts out: the lease then keeps no record.
    disks: persistent disks to mount at creation, ``{"/mnt/data": disk}``
        (a ``Disk``, its id, or its name: looked up first, 1 request). The
        lease detaches them (flushing them to their buckets) before it
        destroys the sandbox.
    networks: private networks (``Network`` objects or ids) the sandbox
        joins at creation; it leaves them before the lease destroys it.
    ssh_keys: OpenSSH public keys authorised on the new sandbox (or fork).
"""

KEYWORDS = frozenset(LeaseKeywords.__annotations__)
F = TypeVar("F", bound=Callable[..., Any])


def lease_options(caller: str, shape: str | None, keywords: Mapping[str, Any]) -> LeaseOptions:
    """The validated options of a call to ``caller(shape, **keywords)``; nothing is sent."""
    unknown = sorted(set(keywords) - KEYWORDS)
    if unknown:
        raise TypeError(f"{caller}() got an unexpected keyword argument {unknown[0]!r}")
    return LeaseOptions(shape=shape, **keywords)


def takes_lease_keywords(function: F) -> F:
    """Show every lease keyword in ``function``'s signature and docstring (``help()``, Jupyter).

    ``function`` takes ``**options: Unpack[LeaseKeywords]``; at run time its
    signature lists the keywords one by one, with their defaults, as if
    written out, and its docstring ends with their descriptions.
    """
    signature = inspect.signature(function)
    own = [p for p in signature.parameters.values() if p.kind is not p.VAR_KEYWORD]
    defaults = {f.name: f.default for f in attrs.fields(LeaseOptions)}
    shared = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None if isinstance(defaults[name], attrs.Factory) else defaults[name],  # type: ignore[arg-type]
            annotation=getattr(annotation, "__forward_arg__", annotation),
        )
        for name, annotation in LeaseKeywords.__annotations__.items()
    ]
    function.__signature__ = signature.replace(parameters=own + shared)  # type: ignore[attr-defined]
    function.__doc__ = f"{inspect.cleandoc(function.__doc__ or '')}\n\n{KEYWORDS_DOC}"
    return function
