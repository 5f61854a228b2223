"""Server-provided text that may reach a user: checked against a strict pattern first.

A hostile or broken service may answer anything, an echo of the API key
included, in any field. Whatever the service hands back and the package
shows (in a message, a repr, a result, or a URL path) goes through one of
these checks: an id must look like an id before it is ever put in a path,
a token that does not match its pattern is replaced by a fixed placeholder
instead of being shown, and free text (the ``message`` of a 4xx) is shown
only once ``scrub`` has removed the key and everything the caller sent. A
build log line (``log_line``) is the output of the caller's own commands:
only the key and terminal escapes are removed from it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus

from ..errors import ProtocolError

UNRECOGNISED = "(unrecognised)"
REDACTED = "[redacted]"

SANDBOX_STATUSES = (
    "creating", "running", "pausing", "paused", "resuming", "forking",
    "error", "destroying", "destroyed", "failed",
)  # fmt: skip

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
SIGNAL = re.compile(r"SIG[A-Z0-9]{1,16}\Z")
ERROR_CODE = re.compile(r"[a-z0-9_]{1,64}\Z")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
STATUS = re.compile(rf"(?:{'|'.join(SANDBOX_STATUSES)})\Z")
TEMPLATE_STATUS = re.compile(r"(?:pending|building|ready|failed)\Z")
# A host name, a "*." wildcard or a CIDR (IPv4 or IPv6), optionally with a port.
EGRESS_RULE = re.compile(r"[A-Za-z0-9*._:/\[\]-]{1,255}\Z")
PORT_PLACEHOLDER = "<port>"
_URL = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2048}\Z")

MESSAGE_LIMIT = 200
# A value this short is hidden only where it stands alone ("DEBUG=1" but not "s-1vcpu"):
# hiding every occurrence of "1" would destroy the message, and it is no secret.
_SHORT = 4
# What a service may echo of a request line: "?after=0", "&path=/x".
_QUERY = re.compile(r"[?&][^\s?&=]*=\S*")
# Terminal escape sequences (colours, cursor moves), then any other control character.
_ESCAPES = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
_CONTROLS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def checked_id(value: object, what: str) -> str:
    """An id from an answer, safe to put in a URL path; ``ProtocolError`` otherwise.

    ``what`` names the field and the answer ("sandbox id in the answer to
    sandbox creation"); the value itself is never shown.
    """
    if not isinstance(value, str) or not ID.match(value):
        raise ProtocolError(f"the {what} is missing or not a plausible id")
    return value


def token(value: object, pattern: re.Pattern[str]) -> str | None:
    """``value`` if it is a str matching ``pattern``; None if absent; else the placeholder."""
    if value is None:
        return None
    if isinstance(value, str) and pattern.match(value):
        return value
    return UNRECOGNISED


def request_id(value: object, secrets: Iterable[str]) -> str | None:
    """A request id checked like a ``token``, and replaced by the placeholder if it holds
    one of ``secrets`` (a service could echo the key or a sent value there)."""
    checked = token(value, REQUEST_ID)
    if checked is None or checked == UNRECOGNISED:
        return checked
    return checked if scrub(checked, secrets) == checked else UNRECOGNISED


def egress_rules(value: object) -> list[str] | None:
    """Egress rules from an answer, each checked like a ``token``; None if not a list."""
    if not isinstance(value, list):
        return None
    return [r if isinstance(r, str) and EGRESS_RULE.match(r) else UNRECOGNISED for r in value]


def url_template(value: object) -> str | None:
    """An ingress URL template: None if absent or empty; the placeholder unless it is made
    of URL characters around at least one ``<port>``.

    This checks only what may be shown; ``network.preview_url`` checks the URL it makes.
    """
    if value is None or value == "":
        return None
    if (
        isinstance(value, str)
        and PORT_PLACEHOLDER in value
        and _URL.match(value.replace(PORT_PLACEHOLDER, "1"))
    ):
        return value
    return UNRECOGNISED


_SURROGATE = re.compile("[\ud800-\udfff]")


def no_surrogates(what: str, text: str) -> str:
    """``text``, unless it holds a lone surrogate: ``ValueError`` naming ``what``, never
    the value (it may be a secret).

    ``os.environ`` and ``sys.argv`` hold undecodable bytes as lone surrogates
    (``"\\udcff"``); such text has no UTF-8 form, so no request can carry it as sent.
    """
    if _SURROGATE.search(text):
        raise ValueError(
            f"{what} is not valid Unicode text: it holds a lone surrogate (undecodable "
            "bytes, as os.environ keeps them). Decode those bytes first, for example "
            "os.fsencode(value).decode('utf-8', 'replace')"
        )
    return text


def sent_values(*parts: Any) -> tuple[str, ...]:
    """Every string a request carried: the leaves of its JSON body and its query values.

    Keys are names (``PATH``, ``shape``), not secrets; values may be anything
    the caller holds dear (an env value, a file path).
    """
    found: list[str] = []
    pending = list(parts)
    while pending:
        part = pending.pop()
        if isinstance(part, str):
            if part:
                found.append(part)
        elif isinstance(part, Mapping):
            pending.extend(part.values())
        elif isinstance(part, (list, tuple)):
            pending.extend(part)
    return tuple(found)


def scrub(text: object, secrets: Iterable[str]) -> str | None:
    """Server text fit to show: ``secrets`` and query strings removed, printable, bounded.

    ``secrets`` are the API key and every value the request sent; each is
    removed as written and in the encoded forms an echo may take (JSON and
    URL escapes). Returns None when nothing useful is left.
    """
    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return _scrubbed(text, secrets)
    except Exception:  # never raise (nor show) from here: what cannot be scrubbed is not shown
        return None


def _scrubbed(text: str, secrets: Iterable[str]) -> str | None:
    for secret in sorted(_pieces(secrets), key=len, reverse=True):
        if len(secret) > len(text):
            continue  # no form of it is shorter (see ``_forms``): none can be in the text
        for form in _forms(secret):
            text = _remove(text, form)
    text = _QUERY.sub(REDACTED, text)
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(text) > MESSAGE_LIMIT:
        text = text[: MESSAGE_LIMIT - 1].rstrip() + "…"
    return text or None


def _pieces(secrets: Iterable[str]) -> set[str]:
    """Each secret, and each of its lines on its own: a service may quote one line of a
    sent value (typed text, a script) without the rest, or without its newline."""
    pieces = set()
    for secret in secrets:
        if not isinstance(secret, str) or not secret:
            continue
        pieces.add(secret)
        pieces.update(line.strip() for line in secret.splitlines() if line.strip())
    return pieces


def _forms(secret: str) -> set[str]:
    """``secret`` as written and as an echo may encode it (JSON, URL escapes; text with
    lone surrogates, which has no UTF-8 form, in each way the OS or a service renders it).

    Each form is at least as long as ``secret``: an escape stands for one character or
    one byte, and a character has at least one byte.
    """
    forms = {secret, json.dumps(secret)[1:-1]}
    for errors in ("strict", "surrogateescape", "surrogatepass"):
        try:
            forms |= {quote(secret, safe="", errors=errors), quote_plus(secret, errors=errors)}
        except UnicodeEncodeError:
            continue
    return {f for f in forms if f}


def _remove(text: str, form: str) -> str:
    if len(form) >= _SHORT:
        return text.replace(form, REDACTED)
    return re.sub(rf"(?<![A-Za-z0-9]){re.escape(form)}(?![A-Za-z0-9])", REDACTED, text)


def log_line(text: str, limit: int, *, secret: str | None = None) -> str:
    """A build log line fit for a terminal: ``secret`` (in its encoded forms too) and
    terminal escapes removed, control characters dropped, at most ``limit`` characters.

    Unlike ``scrub``, query strings and sent values stay: the line is the
    output of the caller's own Dockerfile, which they need to read as written.
    """
    # Stripped first: a secret split by an escape ("sk-12\x1b[0m34") is whole once shown.
    text = _CONTROLS.sub("", _ESCAPES.sub("", text))
    if secret:
        for form in _forms(secret):
            text = _remove(text, form)
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
