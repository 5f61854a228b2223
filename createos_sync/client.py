"""``Client``: configuration, one HTTP session and one request pacer, shared by its leases."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from types import EllipsisType, TracebackType

import requests

from . import _api, _retry, templates
from ._deadline import Deadline
from ._http import Transport
from ._options import LeaseOptions, OnExit, check_seconds
from .config import Config
from .lease import Lease
from .models import SandboxInfo, Shape, Template


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
        ingress: bool | None = False,
        auto_pause_after: int | None = None,
        max_lifetime: float | None = None,
        ttl: float | EllipsisType | None = ...,
        sandbox_id: str | None = None,
        fork_from: str | None = None,
        start_paused: bool = False,
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
            start_paused=start_paused,
            on_exit=on_exit,
            timeout=timeout,
            journal=journal,
        )
        return Lease(self, options)

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
            self.transport,
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
            Template.from_api(t) for t in _api.list_templates(self.transport, self._deadline())
        ]

    def template(self, template_id: str) -> Template:
        """One template (1 request)."""
        _check_id("template_id", template_id)
        return Template.from_api(_api.get_template(self.transport, template_id, self._deadline()))

    def delete_template(self, template_id: str) -> None:
        """Delete a template (1 request); one already gone (404) counts as deleted.

        Sandboxes already made from it are not affected.
        """
        _check_id("template_id", template_id)
        _api.delete_template(self.transport, template_id, self._deadline())

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


def _check_id(what: str, value: object) -> None:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{what} must be a non-empty str")
