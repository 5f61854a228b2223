"""CI cache on a persistent disk: the second job finds what the first one built.

    python examples/ci_cache_disk.py

A persistent disk is an S3 bucket mounted in the sandbox; here it holds a
pip-style cache between CI jobs, each in a fresh sandbox. The lease detaches
the disk (which flushes it to the bucket) before it destroys the sandbox, so
the next job sees every file the last one wrote. With CREATEOS_API_KEY set,
the bucket comes from CACHE_BUCKET, CACHE_ENDPOINT, CACHE_ACCESS_KEY and
CACHE_SECRET_KEY; without it, a local emulator stands in (its "bucket" is a
directory of its own, and the keys are placeholders it never uses).
"""

from __future__ import annotations

import contextlib
import os
import sys

import createos_sync as cs

DISK = "ci-cache"
CACHE = "/mnt/cache"
# The expensive step: built once, then taken from the cache (a pip wheel cache, a
# dataset, compiled dependencies...). PIP_CACHE_DIR=/mnt/cache/pip does the same for pip.
JOB = f"""
if [ -f {CACHE}/deps/built.txt ]; then echo "cache hit: $(cat {CACHE}/deps/built.txt)"
else mkdir -p {CACHE}/deps && sleep 1 && echo "deps built by job $JOB" > {CACHE}/deps/built.txt
     echo "cache miss: built the dependencies"
fi
"""


def cache_disk(client: cs.Client) -> cs.Disk:
    """The cache's disk: registered once for the account, found by name afterwards."""
    with contextlib.suppress(cs.CreateosApiError):
        return client.disk(DISK)
    return client.create_disk(
        DISK,
        bucket=os.environ.get("CACHE_BUCKET", "ci-cache"),
        endpoint=os.environ.get("CACHE_ENDPOINT", "https://s3.example.com"),
        access_key=os.environ.get("CACHE_ACCESS_KEY", "emulator-placeholder"),
        secret_key=os.environ.get("CACHE_SECRET_KEY", "emulator-placeholder"),
    )


def job(client: cs.Client, disk: cs.Disk, number: int) -> str:
    with client.lease(disks={CACHE: disk}, max_lifetime=15 * 60) as box:
        return box.run(["bash", "-c", f"JOB={number}; {JOB}"], check=True).stdout.strip()


def main(client: cs.Client) -> None:
    disk = cache_disk(client)
    for number in (1, 2):
        print(f"job {number}: {job(client, disk, number)}")


if __name__ == "__main__":
    with contextlib.ExitStack() as stack:
        if os.environ.get("CREATEOS_API_KEY"):
            client = stack.enter_context(cs.Client())
        else:
            from createos_sync.emulator import Emulator

            print("(no CREATEOS_API_KEY: local emulator)", file=sys.stderr)
            emulator = stack.enter_context(Emulator())
            client = stack.enter_context(contextlib.closing(emulator.client()))
        main(client)
