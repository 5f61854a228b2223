"""``run()``'s capture keeps raw bytes and decodes once: it must equal what live callbacks see."""

from __future__ import annotations

import pytest

from createos_sync import Lease
from createos_sync.emulator import Emulator, Fault

from .helpers import operations

# Invalid UTF-8 on purpose: lone continuation bytes, an overlong form, a surrogate, and a
# character cut off by the end of the output (decoded as U+FFFD at the end).
WRITER = r"""
import os, sys
noise = b"ok \x80\xbf \xc0\xaf \xed\xa0\x80 \xe2\x82\xac \xf0\x9f\x99\x82 " * 2000
for i in range(0, len(noise), 977):
    os.write(1, noise[i:i + 977])
    os.write(2, noise[i:i + 331])
os.write(1, b"end \xf0\x9f\x99")
"""


@pytest.mark.parametrize("max_output", [0, 1, 5000, 1 << 30])
def test_capture_is_the_tail_of_what_callbacks_received(box: Lease, max_output: int) -> None:
    seen = {"stdout": [], "stderr": []}  # type: dict[str, list[str]]

    result = box.run(
        ["python3", "-c", WRITER],
        max_output=max_output,
        on_output=lambda stream, text: seen[stream].append(text),
        check=True,
    )

    for name, captured in (("stdout", result.stdout), ("stderr", result.stderr)):
        full = "".join(seen[name])
        assert "\ufffd" in full and full.endswith("\ufffd") == (name == "stdout")
        assert captured == (full[len(full) - max_output :] if len(full) > max_output else full)
    assert result.truncated == (max_output < 1 << 30)


# Every byte value, in frames of odd sizes, on both streams; then a lone lead byte at the end.
BINARY_WRITER = r"""
import os
every = bytes(range(256)) * 300
for i in range(0, len(every), 977):
    os.write(1, every[i:i + 977])
    os.write(2, every[i:i + 331][::-1])
os.write(1, b"\xf0")
"""
EVERY = bytes(range(256)) * 300
EXPECTED_ERR = b"".join(EVERY[i : i + 331][::-1] for i in range(0, len(EVERY), 977))


def test_text_false_returns_every_byte_exactly(box: Lease) -> None:
    seen: dict[str, list[bytes]] = {"stdout": [], "stderr": []}

    result = box.run(
        ["python3", "-c", BINARY_WRITER],
        text=False,
        on_output=lambda stream, data: seen[stream].append(data),
        check=True,
    )

    assert result.stdout == EVERY + b"\xf0" == b"".join(seen["stdout"])
    assert result.stderr == EXPECTED_ERR == b"".join(seen["stderr"])
    assert not result.truncated


def test_a_background_process_without_text_yields_and_keeps_bytes(box: Lease) -> None:
    proc = box.start(["python3", "-c", BINARY_WRITER], text=False)
    short = box.start(["python3", "-c", BINARY_WRITER], text=False, max_output=1000)

    streamed = b"".join(data for stream, data in proc.output() if stream == "stdout")

    assert streamed == EVERY + b"\xf0" == proc.wait(60).stdout
    result = short.wait(60)
    assert result.stdout == streamed[-1000:] and result.truncated


def test_the_replay_after_a_dropped_stream_keeps_every_byte(emulator: Emulator) -> None:
    with emulator.client() as client, client.lease() as box:
        emulator.clear_request_log()
        emulator.faults.add(Fault("process.connect", drop_after_frames=3))
        result = box.run(["python3", "-c", BINARY_WRITER], text=False, check=True)
        connects = [op for op in operations(emulator) if op[0] == "process.connect"]
    assert result.stdout == EVERY + b"\xf0" and result.stderr == EXPECTED_ERR
    assert len(connects) == 2  # the stream was dropped, and replayed from where it stopped
