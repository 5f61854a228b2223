"""Quickstart: lease a sandbox, run commands, move a file, and leave nothing behind.

Runs against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator (``pip install 'createos-sync[emulator]'``), so it works anywhere.
"""

from __future__ import annotations

import contextlib
import os

import createos_sync as cs


def main(client: cs.Client) -> None:
    with cs.lease(client=client) as box:
        hello = box.run("echo hello from $(uname -n) && uname -m", check=True)
        print(hello.stdout, end="")
        box.run(["python3", "-c", "print(6 * 7)"], echo=True, check=True)
        box.write_file("/workspace/in.txt", b"round trip\n")
        print(box.read_file("/workspace/in.txt").decode(), end="")
        print(repr(box.run("exit 3")))


if __name__ == "__main__":
    if os.environ.get("CREATEOS_API_KEY"):
        main(cs.Client())
    else:
        from createos_sync.emulator import Emulator

        with Emulator() as emulator, contextlib.closing(emulator.client()) as local:
            print(f"(no CREATEOS_API_KEY: local emulator, isolation={emulator.isolation})")
            main(local)
