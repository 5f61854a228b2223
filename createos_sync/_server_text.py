"""Server-provided text that may reach a user: checked against a strict pattern first.

A hostile or broken service may answer anything, an echo of the API key
included, in any field. Whatever the service hands back and the package
shows (in a message, a repr, a result, or a URL path) goes through one of
these checks: an id must look like an id before it is ever put in a path,
and a token that does not match its pattern is replaced by a fixed
placeholder instead of being shown.
"""

from __future__ import annotations

import re

from .errors import ProtocolError

UNRECOGNISED = "(unrecognised)"

ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}\Z")
SIGNAL = re.compile(r"SIG[A-Z0-9+-]{1,16}\Z")
ERROR_CODE = re.compile(r"[a-z0-9_]{1,64}\Z")
REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}\Z")
STATUS = re.compile(r"[a-z_]{1,32}\Z")
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


def scrub(text: str, limit: int, *, secret: str | None = None) -> str:
    """Free-form server text (a build log line) made safe to show: ``secret`` and
    terminal escapes removed, control characters dropped, at most ``limit`` characters."""
    if secret:
        text = text.replace(secret, "[redacted]")
    text = _CONTROLS.sub("", _ESCAPES.sub("", text))
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"
