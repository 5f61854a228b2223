"""The WSGI application: routing, rate limit, authentication, faults, request log.

Requests for preview URLs (a preview's ``Host``, or a path under
``/_ingress/``) are handed to the ingress proxy before any of that
(``ingress``, ``previews``).

Every request goes through the same steps, in the service's order: route
(one operation name per endpoint), rate limit per client address, API key,
then either a scripted fault or the real handler. The admin endpoints under
``/_emulator`` need the key but are not rate limited, faulted or logged.
"""

from __future__ import annotations

import contextlib
import functools
import hmac
import logging
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from typing import Any

from werkzeug.exceptions import MethodNotAllowed, NotFound
from werkzeug.routing import Map, Rule
from werkzeug.wrappers import Request, Response

from .._machine import links as _links
from .._state.access import AccessStore
from .._state.desktops import Desktops
from .._state.disks import DiskStore
from .._state.overlays import OverlayStore
from .._state.sandboxes import SandboxStore
from .._state.templates import TemplateStore
from .._wire import ApiError, failure, json_body, success
from .api_access import AccessApi
from .api_computer import ROUTES as COMPUTER_ROUTES
from .api_computer import ComputerApi
from .api_disks import DiskApi
from .api_networks import NetworkApi
from .api_processes import ProcessApi
from .api_sandboxes import SandboxApi
from .api_templates import TemplateApi
from .attachments import Attachments
from .faults import Fault, FaultQueue, fault_from_json
from .ingress import IngressProxy
from .ratelimit import RateLimiter
from .requestlog import RequestLog, RequestRecord
from .streams import HEARTBEAT

log = logging.getLogger("createos_sync.emulator")

SB = "/v1/sandboxes/<sandbox_id>"
TPL = "/v1/templates/<template_id>"
PROC = f"{SB}/processes/<process_id>"
ROUTES = (
    ("/healthz", "GET", "healthz"),
    ("/v1/healthz", "GET", "healthz"),
    ("/readyz", "GET", "readyz"),
    ("/v1/hosts", "GET", "hosts"),
    ("/v1/shapes", "GET", "shapes"),
    ("/v1/rootfs", "GET", "rootfs"),
    ("/v1/whoami", "GET", "whoami"),
    ("/v1/sandboxes", "POST", "sandbox.create"),
    ("/v1/sandboxes", "GET", "sandbox.list"),
    (SB, "GET", "sandbox.get"),
    (SB, "DELETE", "sandbox.delete"),
    (SB, "PATCH", "sandbox.patch"),
    (f"{SB}/pause", "POST", "sandbox.pause"),
    (f"{SB}/resume", "POST", "sandbox.resume"),
    (f"{SB}/fork", "POST", "sandbox.fork"),
    (f"{SB}/egress", "GET", "sandbox.egress"),
    (f"{SB}/egress", "PUT", "sandbox.egress"),
    (f"{SB}/files", "PUT", "file.write"),
    (f"{SB}/files", "GET", "file.read"),
    (f"{SB}/exec", "POST", "exec"),
    (f"{SB}/processes", "POST", "process.create"),
    (f"{SB}/processes", "GET", "process.list"),
    (PROC, "GET", "process.get"),
    (PROC, "DELETE", "process.delete"),
    (f"{PROC}/connect", "GET", "process.connect"),
    (f"{PROC}/input", "POST", "process.input"),
    (f"{PROC}/stdin/close", "POST", "process.stdin_close"),
    (f"{PROC}/signal", "POST", "process.signal"),
    (f"{PROC}/resize", "POST", "process.resize"),
    (f"{PROC}/wait", "GET", "process.wait"),
    (f"{SB}/disks", "POST", "disk.attach"),
    (f"{SB}/disks", "GET", "disk.mounts"),
    (f"{SB}/disks/<disk>", "DELETE", "disk.detach"),
    (f"{SB}/networks", "POST", "network.attach"),
    (f"{SB}/networks/<network_id>", "DELETE", "network.detach"),
    (f"{SB}/access-token", "POST", "token.create"),
    (f"{SB}/access-token", "GET", "token.get"),
    (f"{SB}/access-token", "DELETE", "token.delete"),
    (f"{SB}/access-token/rotate", "POST", "token.rotate"),
    (f"{SB}/ssh-pubkeys", "POST", "sandbox.ssh_keys"),
    (f"{SB}/resize", "POST", "sandbox.resize"),
    (f"{SB}/bandwidth", "GET", "sandbox.bandwidth"),
    (f"{SB}/bandwidth/recharge", "POST", "sandbox.recharge"),
    ("/v1/sandboxes/by-ip/<ip>", "GET", "sandbox.by_ip"),
    ("/v1/disks", "POST", "disk.create"),
    ("/v1/disks", "GET", "disk.list"),
    ("/v1/disks/<disk>", "GET", "disk.get"),
    ("/v1/disks/<disk>", "DELETE", "disk.delete"),
    ("/v1/disks/<disk>", "PATCH", "disk.rotate"),
    ("/v1/networks", "POST", "network.create"),
    ("/v1/networks", "GET", "network.list"),
    ("/v1/networks/<network_id>", "GET", "network.get"),
    ("/v1/networks/<network_id>", "DELETE", "network.delete"),
    ("/v1/templates", "POST", "template.create"),
    ("/v1/templates", "GET", "template.list"),
    (TPL, "GET", "template.get"),
    (TPL, "DELETE", "template.delete"),
    (f"{TPL}/logs", "GET", "template.logs"),
    ("/_emulator/faults", "POST", "admin.faults_add"),
    ("/_emulator/faults", "DELETE", "admin.faults_clear"),
    ("/_emulator/state", "GET", "admin.state"),
    ("/_emulator/requests", "GET", "admin.requests"),
)
PUBLIC = frozenset({"healthz", "readyz", "shapes", "rootfs"})
# A sandbox access token may not mint keys (the account's key manages them); it reads what
# its own sandbox's token is (its hint, never the secret).
NOT_FOR_TOKENS = frozenset({"token.create", "token.rotate", "token.delete"})
# Nor may it make a sandbox: a fork would be one that no lease or journal knows and the
# token cannot destroy. (Creating one is account-wide: no sandbox_id, refused below.)
MAKE_SANDBOXES = frozenset({"sandbox.fork"})
ACCOUNT = "account"

Handler = Callable[..., Response]


class _Dropped(Response):
    """Marker response: the connection was cut instead of answered."""


_map_lock = threading.Lock()


@functools.cache
def _route_map_unlocked() -> Map:
    return Map(
        [
            Rule(path, methods=[method], endpoint=op)
            for path, method, op in (*ROUTES, *COMPUTER_ROUTES)
        ],
        strict_slashes=False,
        merge_slashes=False,
    )


def _route_map() -> Map:
    """The routes, compiled once per interpreter.

    Werkzeug compiles each rule with ``ast``, and CPython 3.11's AST
    conversion is not safe to run in several threads at once ("AST
    constructor recursion depth mismatch"): emulators started side by side
    in threads would break. The map is immutable once built, so one serves all.
    """
    with _map_lock:
        return _route_map_unlocked()


class App:
    """The emulator's WSGI callable."""

    def __init__(
        self,
        store: SandboxStore,
        templates: TemplateStore,
        *,
        api_key: str,
        faults: FaultQueue,
        limiter: RateLimiter | None,
        requests: RequestLog,
        heartbeat: float,
        previews: str = "path",
        in_use_after: float = 1.0,
    ) -> None:
        self._store = store
        self._key = api_key.encode()
        self._faults = faults
        self._limiter = limiter
        self._requests = requests
        self._map = _route_map()
        self._ingress = IngressProxy(store, paths=previews == "path")
        self._access = AccessStore()
        disks = DiskStore(store.root, store.isolation)
        overlays = OverlayStore(_links.choose(store.networks.name), in_use_after)
        self.overlays = overlays
        attached = Attachments(store, disks, overlays, self._access)
        sandboxes = SandboxApi(store, templates, attached)
        disk_api = DiskApi(store, disks)
        network_api = NetworkApi(store, overlays)
        access_api = AccessApi(store, self._access)
        processes = ProcessApi(store, heartbeat)
        builds = TemplateApi(templates, heartbeat)
        self._delete_process = processes.delete
        self._handlers: dict[str, Handler] = {
            "healthz": sandboxes.healthz,
            "readyz": sandboxes.readyz,
            "hosts": sandboxes.hosts,
            "shapes": sandboxes.shapes,
            "rootfs": sandboxes.rootfs,
            "whoami": sandboxes.whoami,
            "sandbox.create": sandboxes.create,
            "sandbox.list": sandboxes.list,
            "sandbox.get": sandboxes.get,
            "sandbox.delete": sandboxes.delete,
            "sandbox.patch": sandboxes.patch,
            "sandbox.pause": sandboxes.pause,
            "sandbox.resume": sandboxes.resume,
            "sandbox.fork": sandboxes.fork,
            "sandbox.egress": sandboxes.egress,
            "file.write": sandboxes.file_write,
            "file.read": sandboxes.file_read,
            "exec": processes.exec,
            "process.create": processes.create,
            "process.list": processes.list,
            "process.get": processes.get,
            "process.connect": processes.connect,
            "process.input": processes.input,
            "process.stdin_close": processes.stdin_close,
            "process.signal": processes.signal,
            "process.resize": processes.resize,
            "process.wait": processes.wait,
            "process.delete": processes.delete,
            "disk.create": disk_api.create,
            "disk.list": disk_api.list,
            "disk.get": disk_api.get,
            "disk.delete": disk_api.delete,
            "disk.rotate": disk_api.rotate,
            "disk.attach": disk_api.attach,
            "disk.mounts": disk_api.mounts,
            "disk.detach": disk_api.detach,
            "network.create": network_api.create,
            "network.list": network_api.list,
            "network.get": network_api.get,
            "network.delete": network_api.delete,
            "network.attach": network_api.attach,
            "network.detach": network_api.detach,
            "token.create": access_api.token_create,
            "token.get": access_api.token_get,
            "token.delete": access_api.token_delete,
            "token.rotate": access_api.token_rotate,
            "sandbox.ssh_keys": access_api.ssh_keys,
            "sandbox.resize": access_api.resize,
            "sandbox.bandwidth": access_api.bandwidth,
            "sandbox.recharge": access_api.recharge,
            "sandbox.by_ip": access_api.by_ip,
            "template.create": builds.create,
            "template.list": builds.list,
            "template.get": builds.get,
            "template.delete": builds.delete,
            "template.logs": builds.logs,
            "admin.faults_add": self._faults_add,
            "admin.faults_clear": self._faults_clear,
            "admin.state": self._state,
            "admin.requests": self._request_list,
        }
        self._handlers.update(ComputerApi(Desktops(store)).handlers())

    def __call__(self, environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if self._ingress.claims(environ):
            return self._ingress(environ, start_response)  # preview URLs: not the API
        request = Request(environ)
        response = self._dispatch(request)
        response.headers["X-Request-Id"] = f"req-{secrets.token_hex(6)}"
        return response(environ, start_response)

    def _dispatch(self, request: Request) -> Response:
        try:
            operation, args = self._map.bind_to_environ(request.environ).match()
        except NotFound:
            return self._logged(request, None, failure(ApiError(404, "no such endpoint")))
        except MethodNotAllowed:
            return self._logged(request, None, failure(ApiError(405, "method not allowed")))
        admin = operation.startswith("admin.")
        try:
            if not admin and self._limiter is not None:
                wait = self._limiter.admit(request.remote_addr or "?")
                if wait is not None:
                    raise ApiError(429, "rate limit exceeded", headers={"Retry-After": str(wait)})
            if operation not in PUBLIC:
                self._authorize(request, operation, args, admin)
            fault = None if admin else self._faults.take(operation)
            if fault is not None:
                response = self._faulted(fault, operation, request, args)
            else:
                response = self._handlers[operation](request, **args)
        except ApiError as error:
            response = failure(error)
        except Exception:
            log.exception("emulator handler for %s failed", operation)
            response = failure(ApiError(500, "internal emulator error"))
        return response if admin else self._logged(request, operation, response)

    def _authorize(
        self, request: Request, operation: str, args: Mapping[str, Any], admin: bool
    ) -> None:
        """The account's key passes; a sandbox's access token, for its own sandbox only
        (any other answers 404, as on the service; account-wide endpoints 403)."""
        given = request.headers.get("X-Api-Key", "")
        if hmac.compare_digest(given.encode("utf-8", "replace"), self._key):
            return
        sandbox_id = None if admin or not given else self._access.sandbox_of(given)
        if sandbox_id is None:
            raise ApiError(401, "missing or invalid API key")
        if operation in NOT_FOR_TOKENS:
            raise ApiError(403, "a sandbox access token cannot manage tokens: use the account key")
        if "sandbox_id" not in args or operation in MAKE_SANDBOXES:
            raise ApiError(403, "a sandbox access token acts on its own sandbox only")
        if args["sandbox_id"] != sandbox_id:
            raise ApiError(404, "sandbox not found")

    def _logged(self, request: Request, operation: str | None, response: Response) -> Response:
        dropped = isinstance(response, _Dropped)
        status = None if dropped else response.status_code
        self._requests.add(RequestRecord(request.method, request.path, operation, status))
        if dropped:
            _cut(request)  # only now: the log must show the drop before the client sees it
        return response

    # -- faults ------------------------------------------------------------

    def _faulted(
        self, fault: Fault, operation: str, request: Request, args: Mapping[str, Any]
    ) -> Response:
        handler = self._handlers[operation]
        response: Response
        if fault.status is not None or fault.drop or fault.body is not None:
            if fault.perform:
                # If the real action fails, the answer is replaced all the same.
                with contextlib.suppress(ApiError):
                    handler(request, **args).close()
            time.sleep(fault.delay)
            if fault.drop:
                return _Dropped(b"")
            if fault.body is not None:
                streams = ("process.connect", "template.logs")
                mimetype = "application/x-ndjson" if operation in streams else None
                return Response(fault.body, mimetype=mimetype or "application/json")
            assert fault.status is not None
            headers = {} if fault.retry_after is None else {"Retry-After": str(fault.retry_after)}
            error = ApiError(fault.status, fault.message, headers=headers, envelope=fault.envelope)
            return failure(error)
        if fault.tree_exited_false:
            response = self._delete_process(request, **args, confirm=False, kill=fault.kill)
        else:
            response = handler(request, **args)
        time.sleep(fault.delay)
        stream: Iterable[bytes] = response.response  # type: ignore[assignment]
        body: Iterable[bytes] | None = None
        if fault.drop_after_frames is not None and response.status_code == 200:
            counted = _is_event if operation == "template.logs" else _is_frame
            body = _DropAfter(stream, fault.drop_after_frames, request, counted)
        elif fault.trickle:
            body = _Trickle(stream, fault.trickle)
        elif fault.hold_open and response.status_code == 200:
            body = _HoldOpen(stream, fault.hold_open)
        if body is not None:
            response = Response(body, status=response.status_code, headers=response.headers,
                                direct_passthrough=True)  # fmt: skip
        return response

    # -- admin -------------------------------------------------------------

    def _faults_add(self, request: Request) -> Response:
        try:
            fault = fault_from_json(json_body(request))
        except ValueError as exc:
            raise ApiError(400, str(exc)) from None
        self._faults.add(fault)
        return success({"pending": len(self._faults.pending())}, 201)

    def _faults_clear(self, request: Request) -> Response:
        self._faults.clear()
        return success({"pending": 0})

    def _state(self, request: Request) -> Response:
        processes = [asdict(p) for p in self._store.live_processes()]
        return success({"sandboxes": self._store.live_ids(), "processes": processes})

    def _request_list(self, request: Request) -> Response:
        return success([asdict(r) for r in self._requests.records()])


def _cut(request: Request) -> None:
    """Close the client's connection without an answer."""
    sock: socket.socket | None = request.environ.get("werkzeug.socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)


class _HoldOpen:
    """A stream body that stays open (sending heartbeats) for ``seconds`` after the exit frame.

    The heartbeats also make the handler notice soon when the client has gone.
    """

    def __init__(self, body: Iterable[bytes], seconds: float) -> None:
        self._body = body
        self._seconds = seconds

    def __iter__(self) -> Iterator[bytes]:
        for line in self._body:
            yield line
            if line.startswith(b'{"type":"exit"'):
                ends = time.monotonic() + self._seconds
                while time.monotonic() < ends:
                    time.sleep(0.05)
                    yield HEARTBEAT

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()


def _is_frame(line: bytes) -> tuple[bool, bool]:
    """(counted, cut before it once the count is reached) for a process output line."""
    data = line.startswith(b'{"type":"data"')
    return data, data or line.startswith(b'{"type":"exit"')


def _is_event(line: bytes) -> tuple[bool, bool]:
    """The same for a build log line: every event counts (keep-alive lines do not)."""
    event = line.startswith(b"{")
    return event, event


class _DropAfter:
    """A stream body that cuts the connection after ``frames`` data frames (or log events)."""

    def __init__(
        self,
        body: Iterable[bytes],
        frames: int,
        request: Request,
        counted: Callable[[bytes], tuple[bool, bool]],
    ) -> None:
        self._body = body
        self._frames = frames
        self._request = request
        self._counted = counted

    def __iter__(self) -> Iterator[bytes]:
        sent = 0
        for line in self._body:
            counts, cuts = self._counted(line)
            if sent == self._frames and cuts:
                _cut(self._request)
                return
            sent += counts
            yield line

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()


class _Trickle:
    """A body sent one byte at a time, ``interval`` seconds apart (a slow or hostile link)."""

    def __init__(self, body: Iterable[bytes], interval: float) -> None:
        self._body = body
        self._interval = interval

    def __iter__(self) -> Iterator[bytes]:
        yield b""  # the status line and headers go at once
        for chunk in self._body:
            for i in range(len(chunk)):
                time.sleep(self._interval)
                yield chunk[i : i + 1]

    def close(self) -> None:
        close = getattr(self._body, "close", None)
        if close is not None:
            close()
