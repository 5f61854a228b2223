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
# A host name, a "*." wildcard or a CIDR (IPv4 or IPv6), optionally with a port.
EGRESS_RULE = re.compile(r"[A-Za-z0-9*._:/\[\]-]{1,255}\Z")
PORT_PLACEHOLDER = "<port>"
_URL = re.compile(r"[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]{1,2048}\Z")


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
