"""Query strings of createos-sync requests never reach urllib3's own log lines.

The SDK's own log lines carry paths only, but with ``logging.basicConfig(
level=logging.DEBUG)`` urllib3 logs every request line itself, query string
included (``GET /v1/sandboxes/sb-1/files?path=/workspace/secret-name.txt``),
and a query may name a user's file. A filter on urllib3's connection-pool and
retry loggers rewrites those records before any handler sees them: the query
of a request to a configured CreateOS base URL becomes ``?[redacted]``.

Which records are ours: the request line names its origin (scheme, host,
port), which must be one a ``Client`` was configured with. urllib3's retry
lines name the path only; those are redacted when the path lies under the
API root of a configured base URL (``/v1/...``). Records of other requests
are left as they are.
"""

from __future__ import annotations

import logging
import re
import threading
from urllib.parse import urlsplit

LOGGERS = ("urllib3.connectionpool", "urllib3.util.retry")
REDACTED = "?[redacted]"
# A query: from "?" to the next blank, quote or end of the message.
_QUERY = re.compile(r"\?[^\s'\"]*")
# urllib3's request line: '%s://%s:%s "%s %s %s" %s %s' (scheme, host, port, method, url, ...)
_REQUEST_LINE_ARGS = 8

_lock = threading.Lock()
_origins: set[tuple[str, str, int]] = set()
_roots: set[str] = set()
_installed = False


def _origin(scheme: str, host: str, port: int | None) -> tuple[str, str, int]:
    scheme = scheme.lower()
    return scheme, host.strip("[]").lower(), port or (443 if scheme == "https" else 80)


class RedactQueries(logging.Filter):
    """Rewrites the query strings of records about requests to a configured base URL."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed record is not ours to fix
            return True
        if "?" in message and _is_ours(record, message):
            record.msg, record.args = _QUERY.sub(REDACTED, message), ()
        return True


def _is_ours(record: logging.LogRecord, message: str) -> bool:
    args = record.args
    if isinstance(args, tuple) and len(args) == _REQUEST_LINE_ARGS:
        scheme, host, port = args[:3]
        return _origin(str(scheme), str(host), port if isinstance(port, int) else None) in _origins
    return any(f"{root}/" in message for root in _roots)


def redact_queries_for(api_root: str) -> None:
    """Redact, from now on, the query strings urllib3 logs for requests under ``api_root``.

    Idempotent; the filter is installed on urllib3's loggers on first use.
    """
    global _installed
    parts = urlsplit(api_root)
    with _lock:
        _origins.add(_origin(parts.scheme, parts.hostname or "", parts.port))
        _roots.add(parts.path.rstrip("/") or "/")
        if not _installed:
            for name in LOGGERS:
                logging.getLogger(name).addFilter(RedactQueries())
            _installed = True
