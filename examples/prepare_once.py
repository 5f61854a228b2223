"""Prepare once, start many: pay for setup once, then start every job from it.

Two ways: fork a prepared, paused sandbox for each job; or build a template
from a Dockerfile once and lease sandboxes on it. Either way each job gets a
sandbox of its own (changes in one never reach another) and nothing is left
behind.

Runs against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator (``pip install 'createos-sync[emulator]'``), so it works anywhere.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import ThreadPoolExecutor

import createos_sync as cs

SETUP = "mkdir -p /workspace/tool && printf 'echo tool ready: shard $1' > /workspace/tool/run.sh"
DOCKERFILE = f"""\
FROM ubuntu:24.04
ENV TOOL=/workspace/tool/run.sh
RUN {SETUP}
"""


def with_forks(client: cs.Client) -> None:
    with client.lease() as prepared:
        prepared.run(SETUP, check=True)  # setup, paid once
        prepared.pause()  # a paused source: forks copy it, it never changes

        def job(shard: int) -> str:
            with prepared.fork(env={"SHARD": str(shard)}) as box:
                return box.run("sh /workspace/tool/run.sh $SHARD", check=True).stdout.strip()

        with ThreadPoolExecutor(4) as pool:  # fork() is safe from many threads at once
            for line in pool.map(job, range(4)):
                print(f"fork: {line}")


def with_a_template(client: cs.Client) -> None:
    template = client.build_template("prepare-once", DOCKERFILE, on_log=lambda line: None)
    print(f"template {template.name} is {template.status}")
    try:
        for shard in range(2):
            with client.lease(rootfs=template.id) as box:
                print("template:", box.run(f"sh $TOOL {shard}", check=True).stdout.strip())
    finally:
        client.delete_template(template.id)


def main(client: cs.Client) -> None:
    with_forks(client)
    with_a_template(client)
    print("every job ran on the prepared setup")


if __name__ == "__main__":
    if os.environ.get("CREATEOS_API_KEY"):
        main(cs.Client())
    else:
        from createos_sync.emulator import Emulator

        with Emulator() as emulator, contextlib.closing(emulator.client()) as local:
            print(f"(no CREATEOS_API_KEY: local emulator, isolation={emulator.isolation})")
            main(local)
