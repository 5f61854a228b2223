"""Endpoints for templates: submit a build, read, list, delete, and the build log.

``GET .../logs`` answers the log so far as plain text; with ``follow=true``
it answers NDJSON events ``{ts, level, line, attempt, final, status}``,
replaying the log from its first line and then following it live until the
final event (an empty line now and then keeps an idle connection alive).
"""

from __future__ import annotations

import json
from collections.abc import Iterator

from werkzeug.wrappers import Request, Response

from .._state.templates import MAX_DOCKERFILE, BuildLog, TemplateStore
from .._wire import ApiError, json_body, optional_text, page, page_window, query_int, success, text

NDJSON = "application/x-ndjson"
MAX_NAME = 128


class TemplateApi:
    def __init__(self, templates: TemplateStore, heartbeat: float) -> None:
        self._templates = templates
        self._heartbeat = heartbeat

    def create(self, request: Request) -> Response:
        body = json_body(request)
        name, dockerfile = text(body, "name", default=""), text(body, "dockerfile", default="")
        if not name.strip() or len(name) > MAX_NAME:
            raise ApiError(400, f"name must be 1..{MAX_NAME} characters")
        if not dockerfile.strip() or len(dockerfile.encode()) > MAX_DOCKERFILE:
            raise ApiError(400, "dockerfile must be non-empty text of at most 256 KiB")
        template = self._templates.submit(name, dockerfile, optional_text(body, "base") or None)
        return success(template.to_json())

    def list(self, request: Request) -> Response:
        limit, offset = page_window(request)
        chosen, total = self._templates.page(limit, offset)
        return success(page([t.to_json() for t in chosen], total, limit, offset))

    def get(self, request: Request, template_id: str) -> Response:
        include = request.args.get("include") == "dockerfile"
        return success(self._templates.get(template_id).to_json(dockerfile=include))

    def delete(self, request: Request, template_id: str) -> Response:
        template = self._templates.delete(template_id)
        return success({"id": template.id, "status": "deleted"})

    def logs(self, request: Request, template_id: str) -> Response:
        template = self._templates.get(template_id)
        attempt = query_int(request, "attempt", 0, 1 << 31, 0)
        if attempt > 1:
            raise ApiError(404, "no such build attempt")  # the emulator builds once
        if request.args.get("follow") != "true":
            return Response(template.log.text(), mimetype="text/plain")
        stream = _follow(template.log, self._heartbeat)
        return Response(stream, mimetype=NDJSON, direct_passthrough=True)


def _follow(log: BuildLog, heartbeat: float) -> Iterator[bytes]:
    sent = 0
    while True:
        events, final = log.since(sent, heartbeat)
        if not events and not final:
            yield b"\n"
        for event in events:
            yield json.dumps(event, separators=(",", ":")).encode() + b"\n"
        sent += len(events)
        if final and not events:
            return
