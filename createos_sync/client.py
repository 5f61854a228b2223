"""``Client``: configuration, one HTTP session and one request pacer, shared by its leases."""

from __future__ import annotations

import json as jsonlib
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import attrs
import requests

from ._resources import checks, templates
from ._resources import disks as _disks
from ._resources import networks as _networks
from ._resources import tokens as _tokens
from ._wire import api as _api
from ._wire.deadline import Deadline
from ._wire.http import Transport
from .config import Config, RateScope
from .errors import ConfigError
from .lease import Lease
from .lease._options import check_seconds, lease_options, takes_lease_keywords
from .models import AccessToken, Disk, Network, SandboxInfo, Shape, Template

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .lease._options import LeaseKeywords

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
# One or more segments of unreserved characters (and a few sub-delimiters): no scheme, host,
# percent escape, query string or fragment can be written with these; nor ';', which some
# servers (Tomcat) read as the start of path parameters, so that "/..;/admin" climbs.
_API_PATH = re.compile(r"(?:/[A-Za-z0-9._~:@!$'()*+,=-]+)+/?\Z")


class Client:
    """A configured connection to CreateOS; safe to share between threads.

    Args:
        api_key: falls back to ``CREATEOS_API_KEY``.
        base_url: falls back to ``CREATEOS_API_URL``, then
            ``CREATEOS_SANDBOX_BASE_URL``, then the public service. HTTPS
            only, except to a loopback host; a trailing ``/v1`` is accepted.
        timeout: seconds: the default deadline of one operation and the
            default command timeout of ``Lease.run`` (cleanup always gets a
            fresh deadline of its own: ``cleanup_timeout``).
        max_retries: how often a retryable failure (429 or 503 for every
            request; 500, 502, 504 or a lost answer for idempotent ones) is
            tried again.
        requests_per_minute: the request budget per base URL.
        rate_scope: who shares that budget: ``"machine"`` (the default) every
            process of this machine (CreateOS counts requests per caller IP),
            ``"process"`` only this process's clients.
        session: a ``requests.Session`` to use (not closed by ``close()``),
            as it is configured; by default the client makes and owns one,
            which reads the proxy and CA-bundle variables requests honours
            (``HTTPS_PROXY``, ``NO_PROXY``, ``REQUESTS_CA_BUNDLE``...) once,
            here, and never ``~/.netrc``.
        ca_bundle: a PEM file of CA certificates to trust instead of the
            system's, for this client only (an HTTPS emulator, a TLS-inspecting
            proxy); falls back to ``CREATEOS_CA_BUNDLE``, and wins over
            ``REQUESTS_CA_BUNDLE``.
        cleanup_timeout: seconds: the fresh deadline a cleanup gets (ending
            processes, destroying the sandbox), shared out between its steps.
        sleep: how to wait between retries; injectable so that tests of
            retry paths run instantly.

    Raises:
        ConfigError: invalid or missing configuration (before any request).
    """

    def __init__(
        self,
        api_key: str | None = None,
        base_url: str | None = None,
        *,
        timeout: float = 300.0,
        max_retries: int = 3,
        requests_per_minute: int = 300,
        rate_scope: RateScope = "machine",
        session: requests.Session | None = None,
        ca_bundle: str | os.PathLike[str] | None = None,
        cleanup_timeout: float = 60.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.config = Config.resolve(
            api_key,
            base_url,
            timeout=timeout,
            max_retries=max_retries,
            requests_per_minute=requests_per_minute,
            rate_scope=rate_scope,
            ca_bundle=ca_bundle,
            cleanup_timeout=cleanup_timeout,
        )
        if session is not None and ca_bundle is not None:
            raise ConfigError("give ca_bundle or session, not both (set the session's verify)")
        self.sleep = sleep
        self._transport = Transport(self.config, session=session, sleep=sleep)

    def shapes(self) -> list[Shape]:
        """The machine shapes on offer (1 request)."""
        items = _api.list_shapes(self._transport, self._deadline())
        return [Shape.from_api(item) for item in items if isinstance(item, Mapping)]

    def sandboxes(self) -> list[SandboxInfo]:
        """Every sandbox of the account (1 request per 500)."""
        return [
            SandboxInfo.from_api(s) for s in _api.list_sandboxes(self._transport, self._deadline())
        ]

    def sandbox(self, sandbox_id: str) -> SandboxInfo:
        """The sandbox ``sandbox_id``, read afresh (1 request)."""
        _check_id("sandbox_id", sandbox_id)
        return SandboxInfo.from_api(_api.get_sandbox(self._transport, sandbox_id, self._deadline()))

    def destroy(self, sandbox_id: str) -> bool:
        """Destroy the sandbox ``sandbox_id`` (1 request).

        One that is already gone (404) counts as destroyed: no error. Returns
        True if this call destroyed it, False if the service did not know it
        (already destroyed, or a mistyped id).
        """
        _check_id("sandbox_id", sandbox_id)
        return _api.delete_sandbox(self._transport, sandbox_id, self._deadline())

    @takes_lease_keywords
    def lease(self, shape: str | None = None, **options: Unpack[LeaseKeywords]) -> Lease:
        """A lease using this client, like ``createos_sync.lease``.

        Args:
            shape: the machine shape (see the lease keywords below).
            options: the lease keywords below; ``timeout`` defaults to this
                client's ``timeout``.

        Nothing is sent before ``open()`` / ``with``.
        """
        return Lease(self, lease_options("lease", shape, options))

    def build_template(
        self,
        name: str,
        dockerfile: str,
        *,
        base: str | None = None,
        on_log: Callable[[str], None] | None = None,
        echo: bool = False,
        timeout: float | None = None,
    ) -> Template:
        """Build a template from a Dockerfile's text and return it once it is ``ready``.

        The build log is followed live: ``on_log(line)`` is called once per
        line, in order (a dropped log stream is reconnected without repeating
        a line), and ``echo=True`` prints each line (control characters
        removed). Use the result as ``lease(rootfs=template.id)``.

        Args:
            name: the template's name (1..128 printable characters).
            dockerfile: the Dockerfile's text (``FROM``, ``RUN``, ``ENV``, ``WORKDIR``...).
            base: the root file system to build on when the Dockerfile has no ``FROM``.
            timeout: seconds for the whole build (default 1800); when they pass,
                ``OperationTimeout`` is raised and the build goes on at the service.

        Request budget: 1 submission, 1 log stream and 1 read of the ready
        template (2 when it fails), plus 1 stream per reconnection (and 1 read
        when a stream ends before the build does).

        Raises:
            ValueError, TypeError: invalid arguments (an empty name, a Dockerfile
                that is not text), before any request.
            TemplateBuildError: the build failed; the message ends with the
                last lines of its log, ``.template_id`` names the template.
            OperationTimeout: ``timeout`` passed first.
            CreateosApiError: the submission was refused, or its outcome was
                unknown (it is never sent twice: see ``templates()``).
        """
        templates.check_build(name, dockerfile, base, on_log, echo)
        seconds = check_seconds("timeout", timeout) or templates.DEFAULT_BUILD_TIMEOUT
        return templates.build(
            self._transport,
            name,
            dockerfile,
            base,
            on_log=on_log,
            echo=echo,
            deadline=Deadline.after(seconds),
            sleep=self.sleep,
        )

    def templates(self) -> list[Template]:
        """Every template of the account (1 request per 500)."""
        return [
            Template.from_api(t) for t in _api.list_templates(self._transport, self._deadline())
        ]

    def template(self, template_id: str) -> Template:
        """The template ``template_id``, read afresh (1 request)."""
        _check_id("template_id", template_id)
        return Template.from_api(_api.get_template(self._transport, template_id, self._deadline()))

    def delete_template(self, template_id: str) -> bool:
        """Delete the template ``template_id`` (1 request): True if it was deleted, False
        if the service did not know it (404: never made, or already deleted).

        A 404 is no error, since what was asked holds (no such template is left), but
        the caller learns that nothing was deleted. Sandboxes already made from it are
        not affected.
        """
        _check_id("template_id", template_id)
        return _api.delete_template(self._transport, template_id, self._deadline())

    def disks(self) -> list[Disk]:
        """Every persistent disk registered with the account (1 request per 500)."""
        return [Disk.from_api(d) for d in _api.list_disks(self._transport, self._deadline())]

    def create_disk(
        self,
        name: str,
        *,
        bucket: str,
        endpoint: str,
        access_key: str,
        secret_key: str,
        region: str | None = None,
        path_style: bool = False,
    ) -> Disk:
        """Register an S3 bucket as a persistent disk named ``name``; mount it with
        ``lease(disks={"/mnt/data": disk})`` or ``box.attach_disk``.

        ``bucket`` at ``endpoint`` (``region``; ``path_style`` for path-style URLs,
        as MinIO wants), reached with ``access_key`` and ``secret_key``: sent once,
        never kept or shown. 1 request, never repeated after a lost answer
        (``disk(name)`` then says whether it was made).

        Raises:
            ValueError, TypeError: an invalid name (``[a-z0-9][a-z0-9-]{0,62}``), bucket,
                endpoint, region or key, before any request (a key's value is never shown).
        """
        # Masked at once: a traceback rendered with its locals shows this frame's too.
        access_key, secret_key = _disks.masked(access_key, secret_key)
        body = _disks.registration(
            name, bucket=bucket, endpoint=endpoint, access_key=access_key,
            secret_key=secret_key, region=region, path_style=path_style,
        )  # fmt: skip
        return Disk.from_api(_api.create_disk(self._transport, body, self._deadline()))

    def disk(self, id_or_name: str) -> Disk:
        """The disk ``id_or_name`` (its id or its name), read afresh (1 request)."""
        key = _disks.ref_key(_disks.check_ref(id_or_name))
        return Disk.from_api(_api.get_disk(self._transport, key, self._deadline()))

    def delete_disk(self, id_or_name: str | Disk) -> bool:
        """Delete the registration of disk ``id_or_name`` (its bucket keeps its files);
        False if it was unknown.

        Request budget: 1."""
        key = _disks.ref_key(_disks.check_ref(id_or_name))
        return _api.delete_disk(self._transport, key, self._deadline())

    def rotate_disk_credentials(
        self, id_or_name: str | Disk, *, access_key: str, secret_key: str
    ) -> Disk:
        """Replace the stored ``access_key`` and ``secret_key`` of disk ``id_or_name``
        (1 request; the keys are never kept or shown)."""
        access_key, secret_key = _disks.masked(access_key, secret_key)  # as in create_disk
        key = _disks.ref_key(_disks.check_ref(id_or_name))
        keys = _disks.credentials(access_key, secret_key)
        answer = _api.rotate_disk_credentials(self._transport, key, keys, self._deadline())
        return Disk.from_api(answer)

    def networks(self) -> list[Network]:
        """Every private network of the account (1 request per 500)."""
        return [Network.from_api(n) for n in _api.list_networks(self._transport, self._deadline())]

    def create_network(self, name: str) -> Network:
        """A new private network called ``name``; sandboxes join it with
        ``lease(networks=[net])`` or ``box.attach_network(net)`` (1 request, never repeated
        after a lost answer)."""
        checked = checks.network_name(name)
        return Network.from_api(_api.create_network(self._transport, checked, self._deadline()))

    def network(self, network_id: str | Network) -> Network:
        """The network ``network_id`` (or a ``Network``), read afresh: ``.members`` maps
        sandbox ids to their ips on it (1 request)."""
        key = _networks.network_id(_networks.check_ref(network_id))
        return Network.from_api(_api.get_network(self._transport, key, self._deadline()))

    def delete_network(self, network_id: str | Network) -> bool:
        """Delete the network ``network_id``; False if unknown. The service refuses while it
        is in use, also for a few seconds after its members went: this asks again for up
        to 30 s.

        Request budget: 1, plus 1 per refusal while it is in use.
        """
        key = _networks.network_id(_networks.check_ref(network_id))
        return _networks.delete(self._transport, key, self._deadline(), self.sleep)

    def rootfs(self) -> list[str]:
        """The names of the published root file systems (``lease(rootfs=...)``); 1 request."""
        return _api.list_rootfs(self._transport, self._deadline())

    def create_access_token(self, sandbox_id: str) -> AccessToken:
        """A new access token for sandbox ``sandbox_id``, as ``Lease.create_access_token``
        makes one for its own: shown once (keep it like the API key). 1 request, never
        repeated after a lost answer (``rotate_access_token`` then makes a usable one)."""
        _check_id("sandbox_id", sandbox_id)
        return _tokens.create(self._transport, sandbox_id, self._deadline())

    def rotate_access_token(self, sandbox_id: str) -> AccessToken:
        """Replace the token of sandbox ``sandbox_id`` (the old one stops working); 1 request."""
        _check_id("sandbox_id", sandbox_id)
        return _tokens.rotate(self._transport, sandbox_id, self._deadline())

    def disable_access_token(self, sandbox_id: str) -> None:
        """Revoke the token of sandbox ``sandbox_id`` (none, or revoked, is fine); 1 request."""
        _check_id("sandbox_id", sandbox_id)
        _api.disable_access_token(self._transport, sandbox_id, self._deadline())

    def sandbox_by_ip(self, ip: str) -> SandboxInfo:
        """The sandbox with this (private) ip (1 request)."""
        address = checks.ip(ip)
        return SandboxInfo.from_api(_api.sandbox_by_ip(self._transport, address, self._deadline()))

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int | float | bool] | None = None,
    ) -> Any:
        """Send one request to any endpoint under ``/v1``; return the envelope's ``data``.

        The escape hatch for what the package does not wrap (such as
        ``client.request("GET", "/whoami")``).
        ``path`` is relative to ``/v1`` (a leading ``/v1`` is accepted). The
        request goes through the client's pacer, and its errors are the
        package's, secret-safe ones (the message of a 4xx is shown scrubbed
        of the key and of every value ``json`` and ``params`` carried).

        Request budget: 1, plus retries as PROTOCOL.md allows by method: after
        429 or 503 for every method; after 500, 502, 504 or a lost answer only
        for GET, HEAD, PUT and DELETE (POST and PATCH may have taken effect);
        at most ``max_retries`` retries in all.

        Raises:
            ValueError, TypeError: an unknown method, a path that is not a
                relative API path (a URL, ``..``, a query string or fragment),
                ``json`` that is not JSON, or bad ``params``: before any request.
            CreateosApiError: the service answered with a failure, or not at all.
        """
        verb = _checked_method(method)
        relative = _checked_path(path)
        if json is not None:
            try:
                jsonlib.dumps(json, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"json must be JSON-serialisable ({type(exc).__name__})") from None
        query = _checked_params(params)
        return _api.request(
            self._transport, verb, relative, self._deadline(), json_body=json, params=query
        )

    def close(self) -> None:
        """Release the HTTP session (if this client created it)."""
        self._transport.close()

    def _deadline(self) -> Deadline:
        return Deadline.after(self.config.timeout)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Client(base_url={self.config.base_url!r})"


def client_for(config: Config) -> Client:
    """A new client with the settings of ``config`` (in another process, or a fresh session).

    ``Config``'s fields are ``Client``'s settings, by name: the one list of them.
    """
    return Client(**attrs.asdict(config, recurse=False))


def _checked_method(method: object) -> str:
    if not isinstance(method, str):
        raise TypeError("method must be a str such as 'GET'")
    verb = method.upper()
    if verb not in METHODS:
        raise ValueError(f"method must be one of {', '.join(sorted(METHODS))}")
    return verb


def _checked_path(path: object) -> str:
    """A path relative to ``/v1``, such as ``/whoami``; never one that leaves the API."""
    if not isinstance(path, str):
        raise TypeError("path must be a str such as '/whoami'")
    relative = path[len("/v1") :] if path.startswith("/v1/") else path
    segments = relative.split("/")[1:]
    if not _API_PATH.match(relative) or any(not s.strip(".") for s in segments if s):
        raise ValueError(
            "path must be an API path such as '/whoami': it starts with '/' and holds no "
            "scheme, host, dot segment, ';', percent escape, query string or fragment "
            "(use params=)"
        )
    return relative


def _checked_params(params: object) -> dict[str, str] | None:
    if params is None:
        return None
    if not isinstance(params, Mapping):
        raise TypeError("params must be a mapping of names to str, int, float or bool")
    query = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name:
            raise TypeError("params names must be non-empty str")
        if isinstance(value, bool):
            query[name] = "true" if value else "false"
        elif isinstance(value, str) or (isinstance(value, (int, float)) and math.isfinite(value)):
            query[name] = str(value)
        else:
            raise TypeError(f"params[{name!r}] must be a str, int, finite float or bool")
    return query


def _check_id(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty str")
