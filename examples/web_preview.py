"""A web app in the sandbox, opened from here: ingress, wait_for_port, preview_url.

``cs.lease(ingress=True)`` makes the sandbox's ports reachable at preview
URLs; ``wait_for_port`` returns once the app listens (one request, however
long it takes); ``preview_url(port)`` costs no request at all. With
``--hold`` the sandbox stays up until you press Enter, so that you can open
the URL in a browser.

Runs against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator (``pip install 'createos-sync[emulator]'``), whose preview URLs go
through a reverse proxy on this machine's loopback. ``PREVIEW_PORT`` chooses
the port (default 8000).
"""

from __future__ import annotations

import contextlib
import os
import sys

import requests

import createos_sync as cs

PORT = int(os.environ.get("PREVIEW_PORT", "8000"))
PAGE = "<!doctype html><title>preview</title><h1>hello from a web app in the sandbox</h1>\n"


def main(client: cs.Client, bind: str, hold: bool) -> None:
    with cs.lease(client=client, ingress=True) as box:
        box.write_file("/workspace/site/index.html", PAGE)
        server = ["python3", "-m", "http.server", str(PORT), "--bind", bind]
        box.start([*server, "--directory", "/workspace/site"])
        box.wait_for_port(PORT, timeout=30)

        url = box.preview_url(PORT)
        print(f"preview URL: {url}")
        page = requests.get(url, timeout=30)
        page.raise_for_status()
        print(page.text, end="")
        if hold:
            input("open it in a browser; press Enter to destroy the sandbox ")


if __name__ == "__main__":
    hold = "--hold" in sys.argv[1:]
    if os.environ.get("CREATEOS_API_KEY"):
        # Ingress reaches the sandbox's network interface, not its loopback: listen on all.
        with cs.Client() as remote:
            main(remote, "0.0.0.0", hold)
    else:
        from createos_sync.emulator import Emulator

        # The preview proxy reaches a sandbox's loopback (in its private network, where
        # the emulator gives it one); where sandboxes share this machine's network,
        # listening there keeps the app off the local network.
        with Emulator() as emulator, contextlib.closing(emulator.client()) as local:
            main(local, "127.0.0.1", hold)
