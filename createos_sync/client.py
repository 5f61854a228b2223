"""``Client``: configuration, one HTTP session and one request pacer, shared by its leases."""

from __future__ import annotations

import json as jsonlib
import math
import re
import time
from collections.abc import Mapping, Sequence
from types import EllipsisType, TracebackType
from typing import Any

import requests

from . import _api, _retry
from ._deadline import Deadline
from ._http import Transport
from ._options import LeaseOptions, OnExit
from .config import Config
from .lease import Lease
from .models import SandboxInfo, Shape

METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"})
# One or more segments of unreserved characters (and a few sub-delimiters): no scheme, host,
# percent escape, query string or fragment can be written with these.
_API_PATH = re.compile(r"(?:/[A-Za-z0-9._~:@!$'()*+,;=-]+)+/?\Z")


class Client:
    """A configured connection to CreateOS; safe to share between threads.

    ``api_key`` falls back to ``CREATEOS_API_KEY``; ``base_url`` to
    ``CREATEOS_API_URL``, ``CREATEOS_SANDBOX_BASE_URL``, then the public
    service. ``timeout`` is the default deadline of one operation and of one
    command. ``sleep`` is injectable so that tests of retry paths run instantly.

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
        session: requests.Session | None = None,
        sleep: _retry.Sleep = time.sleep,
    ) -> None:
        self.config = Config.resolve(
            api_key,
            base_url,
            timeout=timeout,
            max_retries=max_retries,
            requests_per_minute=requests_per_minute,
        )
        self.sleep = sleep
        self.transport = Transport(self.config, session=session, sleep=sleep)

    def shapes(self) -> list[Shape]:
        """The machine shapes on offer (1 request)."""
        items = _api.list_shapes(self.transport, self._deadline())
        return [Shape.from_api(item) for item in items if isinstance(item, Mapping)]

    def sandboxes(self) -> list[SandboxInfo]:
        """Every sandbox of the account (1 request per 500)."""
        return [
            SandboxInfo.from_api(s) for s in _api.list_sandboxes(self.transport, self._deadline())
        ]

    def sandbox(self, sandbox_id: str) -> SandboxInfo:
        """One sandbox (1 request)."""
        return SandboxInfo.from_api(_api.get_sandbox(self.transport, sandbox_id, self._deadline()))

    def destroy(self, sandbox_id: str) -> None:
        """Destroy a sandbox; one that is already gone (404) counts as destroyed."""
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise ValueError("sandbox_id must be a non-empty str")
        _api.delete_sandbox(self.transport, sandbox_id, self._deadline())

    def lease(
        self,
        shape: str | None = None,
        *,
        rootfs: str | None = None,
        region: str | None = None,
        name: str | None = None,
        egress: Sequence[str] | None = None,
        env: Mapping[str, str] | None = None,
        ingress: bool = False,
        auto_pause_after: int | None = None,
        max_lifetime: float | None = None,
        ttl: float | EllipsisType | None = ...,
        sandbox_id: str | None = None,
        fork_from: str | None = None,
        on_exit: OnExit | None = None,
        timeout: float | None = None,
        journal: bool = True,
    ) -> Lease:
        """A lease using this client; the arguments are those of ``createos_sync.lease``."""
        options = LeaseOptions(
            shape=shape,
            rootfs=rootfs,
            region=region,
            name=name,
            egress=egress,
            env=env,
            ingress=ingress,
            auto_pause_after=auto_pause_after,
            max_lifetime=max_lifetime,
            ttl=ttl,
            sandbox_id=sandbox_id,
            fork_from=fork_from,
            on_exit=on_exit,
            timeout=timeout,
            journal=journal,
        )
        return Lease(self, options)

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, str | int | float | bool] | None = None,
    ) -> Any:
        """Send one request to any endpoint under ``/v1``; return the envelope's ``data``.

        The escape hatch for what the package does not wrap yet (networks,
        disks, bandwidth, ssh keys): ``client.request("GET", "/whoami")``.
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
            self.transport, verb, relative, self._deadline(), json_body=json, params=query
        )

    def close(self) -> None:
        """Release the HTTP session (if this client created it)."""
        self.transport.close()

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
    if not _API_PATH.match(relative) or any(s in (".", "..") for s in segments):
        raise ValueError(
            "path must be an API path such as '/whoami': it starts with '/' and holds no "
            "scheme, host, '..', percent escape, query string or fragment (use params=)"
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
        elif isinstance(value, str) or (
            isinstance(value, (int, float)) and math.isfinite(value)
        ):
            query[name] = str(value)
        else:
            raise TypeError(f"params[{name!r}] must be a str, int, finite float or bool")
    return query
