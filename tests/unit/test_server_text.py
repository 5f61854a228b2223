"""Server text shown to a user: ids and tokens against strict patterns, messages scrubbed."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from createos_sync._wire.server_text import (
    ERROR_CODE,
    REQUEST_ID,
    SIGNAL,
    STATUS,
    UNRECOGNISED,
    _forms,
    request_id,
    scrub,
    sent_values,
    token,
)

KEY = "sk-live-SECRET-abc123"


@pytest.mark.parametrize(
    ("pattern", "good", "bad"),
    [
        (SIGNAL, ["SIGKILL", "SIGTERM", "SIGRTMIN"], ["SIGKILL " + KEY, KEY, "sigkill", "SIG"]),
        (STATUS, ["running", "failed", "destroying"], ["runningx", "abcdefsecret", KEY, ""]),
        (ERROR_CODE, ["output_offset_expired"], [KEY, "a" * 65, "Bad Code", "x\n"]),
        (REQUEST_ID, ["req-9f2c", "a.b:c_d-1"], [f"r {KEY}", "x" * 129, "r\r\nX: y"]),
    ],
)
def test_tokens_match_their_pattern_or_become_a_placeholder(
    pattern: re.Pattern[str], good: list[str], bad: list[str]
) -> None:
    for value in good:
        assert token(value, pattern) == value
    for value in bad:
        assert token(value, pattern) == UNRECOGNISED
    assert token(None, pattern) is None
    assert token(42, pattern) == UNRECOGNISED


def test_sent_values_are_the_string_leaves_of_body_and_query() -> None:
    body = {"shape": "s-1", "envs": {"TOKEN": "t0ps3cret"}, "egress": ["pypi.org"], "n": 3}
    assert sorted(sent_values(body, {"path": "/workspace/x"})) == sorted(
        ["s-1", "t0ps3cret", "pypi.org", "/workspace/x"]
    )
    assert sent_values(None, None) == ()


def test_scrub_removes_the_key_and_sent_values_in_every_encoding() -> None:
    secret = 'p@ss "word"/x'
    text = (
        f"a {KEY} b {secret} c {secret.replace(chr(34), chr(92) + chr(34))} "
        f"d p%40ss%20%22word%22%2Fx e p%40ss+%22word%22%2Fx"
    )
    assert scrub(text, (KEY, secret)) == (
        "a [redacted] b [redacted] c [redacted] d [redacted] e [redacted]"
    )


def test_scrub_hides_short_values_only_where_they_stand_alone() -> None:
    assert scrub("DEBUG=1 breaks s-1vcpu-1gb", ("1",)) == "DEBUG=[redacted] breaks s-1vcpu-1gb"


def test_scrub_removes_query_strings_control_characters_and_bounds_the_text() -> None:
    assert scrub("bad ?path=/a&after=3 now\n\x1b[2J!", ()) == "bad [redacted] now [2J!"
    long = scrub("word " * 100, ())
    assert long is not None and len(long) == 200 and long.endswith("…")
    assert scrub("   ", ()) is None and scrub(None, ()) is None and scrub({"a": 1}, ()) is None


@given(st.text(st.characters(blacklist_categories=()), min_size=1, max_size=40))
def test_no_form_of_a_secret_is_shorter_than_it(secret: str) -> None:
    # ``scrub`` skips the secrets longer than the text on this ground.
    assert all(len(form) >= len(secret) for form in _forms(secret))


def test_a_request_id_is_replaced_when_it_is_a_sent_value_not_when_it_is_shorter() -> None:
    assert request_id("req-9f2c", (KEY, "req-9f2c")) == UNRECOGNISED
    assert request_id("req-9f2c", (KEY, "ab\nreq-9f2c\n")) == UNRECOGNISED  # one line of it
    assert request_id("req-9f2c", (KEY, "req-9f2cx")) == "req-9f2c"
