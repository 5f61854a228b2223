"""Testing your own code with sandboxes: the fixtures of createos-sync's pytest plugin.

    pytest examples/test_with_sandboxes.py                  # a local emulator (the default)
    pytest examples/test_with_sandboxes.py --createos=live  # CreateOS (CREATEOS_API_KEY)

The plugin comes with the package; these tests only name its fixtures. A
lease left open or a sandbox left alive at the end of the session is
reported as an error naming the test that opened it.
"""

from __future__ import annotations

import pytest

import createos_sync as cs


def word_count(box: cs.Lease, text: str) -> int:
    """The code under test: something that does its work in a sandbox."""
    box.write_file("/workspace/in.txt", text)
    return int(box.run("wc -w < /workspace/in.txt", check=True).stdout)


def test_word_count(createos_lease: cs.Lease) -> None:
    # a sandbox of its own for this test, closed (destroyed) after it
    assert word_count(createos_lease, "one two three") == 3


@pytest.mark.createos_lease(env={"GREETING": "hello"})
def test_lease_options_come_from_a_marker(createos_lease: cs.Lease) -> None:
    assert createos_lease.run("echo $GREETING").stdout == "hello\n"


def test_code_that_fans_out(createos_client: cs.Client) -> None:
    texts = ["one", "one two", "one two three"]
    assert cs.map(word_count, texts, client=createos_client, concurrency=3) == [1, 2, 3]


def test_code_that_makes_its_own_client(createos_client: cs.Client) -> None:
    # With --createos=local, CREATEOS_API_URL and CREATEOS_API_KEY point at the
    # emulator for the session: code that calls cs.lease() without a client uses it too.
    with cs.lease() as box:
        assert word_count(box, "just four words here") == 4
