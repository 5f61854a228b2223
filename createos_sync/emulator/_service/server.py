"""``Emulator``: one emulated CreateOS service on a loopback port, in this process."""

from __future__ import annotations

import logging
import secrets
import shutil
import ssl
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ...budget import forget as forget_budget
from ...config import is_loopback
from .._machine.isolation import choose
from .._machine.janitor import Janitor
from .._machine.layers import remove_tree
from .._state.builder import Build
from .._state.sandbox import LiveProcess
from .._state.sandboxes import SandboxStore
from .._state.templates import TemplateStore
from .._wire import ApiError
from . import previews as preview_urls
from .app import App
from .faults import FaultQueue
from .httpd import Connections, serve
from .ratelimit import RateLimiter
from .requestlog import RequestLog, RequestRecord
from .tls import server_context

if TYPE_CHECKING:
    import requests
    from werkzeug.serving import BaseWSGIServer

    from createos_sync import Client

log = logging.getLogger("createos_sync.emulator")

# A data frame's NDJSON line (base64, so 4/3 of the raw bytes) must stay under 1 MiB.
MAX_FRAME_BYTES = 768 * 1024


def _check_loopback(host: str) -> None:
    if not is_loopback(host):  # the package's one loopback rule
        raise ValueError(f"the emulator only listens on loopback addresses, not {host!r}")


class Emulator:
    """A CreateOS-compatible HTTP server on loopback that runs real processes.

    Use it as a context manager, or call ``start()`` and ``close()``.
    With ``tls=True`` it serves HTTPS with a certificate from a throwaway CA
    whose certificate is at ``ca_path`` (``client()`` trusts it).
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        isolation: str = "auto",
        network: str = "auto",
        transition_delay: float = 0.05,
        journal_bytes: int = 1 << 20,
        frame_bytes: int = 64 * 1024,
        rate_limit: int | None = 300,
        heartbeat_interval: float = 1.0,
        root_dir: str | Path | None = None,
        tls: bool = False,
        previews: str = "auto",
    ) -> None:
        _check_loopback(host)
        if isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'none', not {isolation!r}")
        preview_urls.check(previews, host)
        if network not in ("auto", "private", "shared"):
            raise ValueError(f"network must be 'auto', 'private' or 'shared', not {network!r}")
        if not 1 <= frame_bytes <= min(journal_bytes, MAX_FRAME_BYTES):
            raise ValueError("need 1 <= frame_bytes <= journal_bytes and <= 768 KiB")
        if transition_delay < 0 or heartbeat_interval <= 0:
            raise ValueError("transition_delay must be >= 0 and heartbeat_interval > 0")
        self._host = host
        self._port = port
        self.api_key = api_key if api_key is not None else secrets.token_urlsafe(24)
        self._isolation_mode = isolation
        self._network_mode = network
        self._transition_delay = transition_delay
        self._journal_bytes = journal_bytes
        self._frame_bytes = frame_bytes
        self._heartbeat = heartbeat_interval
        self._root_dir = Path(root_dir) if root_dir is not None else None
        self._tls = bool(tls)
        self._previews_mode = previews
        self._tls_dir: str | None = None
        self.faults = FaultQueue()
        self._requests = RequestLog()
        self._limiter = RateLimiter(rate_limit) if rate_limit is not None else None
        self._store: SandboxStore | None = None
        self._templates: TemplateStore | None = None
        self._server: BaseWSGIServer | None = None
        self._connections: Connections | None = None
        self._thread: threading.Thread | None = None
        self._temp_root: str | None = None
        self._janitor: Janitor | None = None
        self.url = ""
        self.isolation = ""
        self.network = ""
        self.previews = ""  # "host" (an origin per sandbox port) or "path", once started
        self.ca_path: str | None = None

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> Emulator:
        """Probe isolation, bind the port and serve from a daemon thread."""
        if self._server is not None:
            raise RuntimeError("the emulator is already started")
        isolation = choose(self._isolation_mode)
        previews = preview_urls.choose(self._previews_mode, self._host)
        try:
            root = self._make_dirs()
            self._store = SandboxStore(
                root,
                isolation,
                transition_delay=self._transition_delay,
                journal_bytes=self._journal_bytes,
                frame_bytes=self._frame_bytes,
                network=self._network_mode,
            )
            self._templates = TemplateStore(
                self._store, root / "templates", Build, frame_bytes=self._frame_bytes
            )
            app = App(
                self._store,
                self._templates,
                api_key=self.api_key,
                faults=self.faults,
                limiter=self._limiter,
                requests=self._requests,
                heartbeat=self._heartbeat,
                previews=previews,
            )
            tls = self._tls_context()
            self._server, self._connections = serve(self._host, self._port, app, tls)
        except BaseException:
            self.close()  # nothing of a failed start is left: processes, threads, directories
            raise
        port = self._server.server_address[1]
        shown = f"[{self._host}]" if ":" in self._host else self._host
        self.url = f"{'https' if tls else 'http'}://{shown}:{port}"
        self._store.ingress_base = preview_urls.template(self.url, previews)
        self.previews = previews
        self.isolation = isolation.name
        self.network = self._store.networks.name
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="createos-emulator",
            daemon=True,
        )
        self._thread.start()
        log.info(
            "CreateOS emulator serving on %s (isolation: %s, network: %s)",
            self.url,
            self.isolation,
            self.describe_network(),
        )
        return self

    def close(self) -> None:
        """Kill every process, stop serving, cut open connections, remove the temp dirs
        and this machine's request budget record of it (no port serves twice)."""
        if self._templates is not None:
            self._templates.close()
        if self._store is not None:
            self._store.close()
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join()
        if self._connections is not None:
            self._connections.cut_all()
        self._server = self._thread = None
        self._remove_temp_dirs()
        if self.url:
            forget_budget(self.url)

    def _make_dirs(self) -> Path:
        """The sandboxes' root, and the TLS CA's directory (HTTPS asked for), kept apart
        from any ``root_dir``. What is temporary is watched by a janitor that removes it
        even after ``kill -9``."""
        root = self._root_dir
        if root is None:
            self._temp_root = tempfile.mkdtemp(prefix="createos-emulator-")
            root = Path(self._temp_root)
        root.mkdir(parents=True, exist_ok=True)
        if self._tls:
            self._tls_dir = tempfile.mkdtemp(prefix="createos-emulator-tls-")
        made = [d for d in (self._temp_root, self._tls_dir) if d is not None]
        if made:
            self._janitor = Janitor(*made)
        return root

    def _tls_context(self) -> ssl.SSLContext | None:
        """A fresh CA and certificate, HTTPS asked for."""
        if self._tls_dir is None:
            return None
        context, ca_path = server_context(Path(self._tls_dir))
        self.ca_path = str(ca_path)
        return context

    def _remove_temp_dirs(self) -> None:
        if self._temp_root is not None:
            remove_tree(Path(self._temp_root))  # overlay work dirs need their mode fixed
            self._temp_root = None
        if self._tls_dir is not None:
            shutil.rmtree(self._tls_dir, ignore_errors=True)
            self._tls_dir = None
            self.ca_path = None
        if self._janitor is not None:
            self._janitor.release()
            self._janitor = None

    def __enter__(self) -> Emulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- for tests ---------------------------------------------------------

    def preview_session(self) -> requests.Session:
        """A ``requests`` session that opens preview URLs as a browser does: ``*.localhost``
        names reach this emulator whatever this machine's resolver says, and each
        preview keeps its own cookies (see ``previews``)."""
        return preview_urls.session(self._host, self.ca_path)

    def client(self, **kwargs: Any) -> Client:
        """A ``createos_sync.Client`` configured for this emulator (trusting its CA over TLS)."""
        from createos_sync import Client

        if self.ca_path is not None:
            kwargs.setdefault("ca_bundle", self.ca_path)
        return Client(api_key=self.api_key, base_url=self.url, **kwargs)

    @property
    def connections_accepted(self) -> int:
        """TCP connections accepted so far: how tests and benchmarks see connection reuse."""
        return self._connections.accepted if self._connections is not None else 0

    @property
    def request_log(self) -> list[RequestRecord]:
        return self._requests.records()

    def clear_request_log(self) -> None:
        self._requests.clear()

    def live_sandboxes(self) -> list[str]:
        """Ids of the sandboxes that are not destroyed (nor being destroyed)."""
        return self._require_store().live_ids()

    def live_processes(self) -> list[LiveProcess]:
        """Processes whose tree still has a running OS process (asks the kernel)."""
        return self._require_store().live_processes()

    def fail_sandbox(self, sandbox_id: str, status: str = "failed") -> None:
        """Make a sandbox break down as a failing VM would (``failed`` or ``error``).

        Its processes are killed, their output streams end without an exit
        frame, and it answers with that status from now on (creating a
        process: 409). It can still be destroyed.
        """
        if status not in ("failed", "error"):
            raise ValueError("status must be 'failed' or 'error'")
        try:
            self._require_store().fail(sandbox_id, status)
        except ApiError:
            raise KeyError(sandbox_id) from None

    def sandbox_path(self, sandbox_id: str, path: str) -> Path:
        """The host path where ``path`` of that sandbox is stored."""
        try:
            sandbox = self._require_store().get(sandbox_id)
        except ApiError:
            raise KeyError(sandbox_id) from None
        host = sandbox.storage.host_path(path)
        if host is None:
            raise ValueError(f"{path!r} is not under /workspace, /tmp or /home/user")
        return host

    def describe_network(self) -> str:
        """The network mode in words: where a sandbox's guest agent is, and its egress."""
        if self.network == "private":
            return "private (a namespace per sandbox, egress through slirp4netns)"
        return "shared (the host's; guest agents named in CREATEOS_AGENT_URL)"

    def _require_store(self) -> SandboxStore:
        if self._store is None:
            raise RuntimeError("the emulator has not been started")
        return self._store

    def __repr__(self) -> str:
        return (
            f"<Emulator {self.url or 'not started'} isolation={self.isolation or '?'} "
            f"network={self.network or '?'}>"
        )
