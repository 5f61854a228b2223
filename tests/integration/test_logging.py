"""With everything at DEBUG, no log line shows the query string of a createos-sync request."""

from __future__ import annotations

import logging
import sys
import textwrap

import pytest

from createos_sync._wire.logredact import redact_queries_for
from createos_sync.emulator import Emulator

from .helpers import own_emulator
from .subprocesses import emulator_env, finish, spawn

# A user's script with DEBUG logging on for every library, as people debug.
SCRIPT = textwrap.dedent(
    """
    import logging, sys
    import requests
    import createos_sync as cs

    logging.basicConfig(level=logging.DEBUG)
    with cs.lease() as box:
        box.write_file("/workspace/secret-name.txt", b"x")
        box.read_file("/workspace/secret-name.txt")
        box.client.sandboxes()  # GET /v1/sandboxes?limit=500&offset=0
    # Another service's requests are not ours to rewrite.
    requests.get(sys.argv[1] + "/healthz?other=visible", timeout=10)
    """
)


def test_debug_logs_show_no_query_string_of_ours(emulator: Emulator) -> None:
    with own_emulator() as other:
        status, _, err = finish(
            spawn([sys.executable, "-c", SCRIPT, other.url], emulator_env(emulator))
        )
    assert status == 0, err
    urllib3_lines = [line for line in err.splitlines() if line.startswith("DEBUG:urllib3")]
    assert any("/files?[redacted]" in line for line in urllib3_lines), err
    assert any("/v1/sandboxes?[redacted]" in line for line in urllib3_lines), err
    assert "secret-name" not in err and "limit=" not in err and "offset=" not in err
    assert "/healthz?other=visible" in err  # only createos-sync's requests are redacted


def test_urllib3_retry_lines_naming_only_a_path_are_redacted_under_the_api_root(
    caplog: pytest.LogCaptureFixture,
) -> None:
    redact_queries_for("http://127.0.0.1:9/v1")
    retry = logging.getLogger("urllib3.util.retry")
    with caplog.at_level(logging.DEBUG, logger="urllib3"):
        # as urllib3 logs it when a session with retries of its own retries a request
        retry.debug("Incremented Retry for (url='%s'): %r", "/v1/sandboxes?limit=500", "Retry(2)")
        retry.debug("Incremented Retry for (url='%s'): %r", "/api/items?page=2", "Retry(2)")
    assert [r.getMessage() for r in caplog.records] == [
        "Incremented Retry for (url='/v1/sandboxes?[redacted]'): 'Retry(2)'",
        "Incremented Retry for (url='/api/items?page=2'): 'Retry(2)'",
    ]
