"""``run()``'s capture keeps raw bytes and decodes once: it must equal what live callbacks see."""

from __future__ import annotations

import pytest

from createos_sync import Lease

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
