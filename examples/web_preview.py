"""A web app in the sandbox, opened from here: ingress, wait_for_port, preview_url.

``cs.lease(ingress=True)`` makes the sandbox's ports reachable at preview
URLs; ``wait_for_port`` returns once the app listens (one request, however
long it takes); ``preview_url(port)`` costs no request at all. With
``--hold`` the sandbox stays up until you press Enter, so that you can open
the URL in a browser.

Each port's preview is an origin of its own, as in a browser: a cookie the
app on one port sets never reaches the app on the other (the script shows
which cookies each app received). It opens them with a ``requests``
session, which keeps cookies per origin as a browser does; against the
local emulator, whose previews are ``http://<port>-<sandbox id>.sb.localhost:...``
hosts (browsers send ``*.localhost`` to this machine), that session is
``preview_session()``, which does the same for Python.

Runs against CreateOS when CREATEOS_API_KEY is set, else against the local
emulator (``pip install 'createos-sync[emulator]'``), whose preview URLs go
through a reverse proxy on this machine's loopback. ``PREVIEW_PORT`` chooses
the first port (default 8000; the second app listens on the next one).
"""

from __future__ import annotations

import contextlib
import os
import sys
from urllib.parse import urlsplit

import requests

import createos_sync as cs

PORT = int(os.environ.get("PREVIEW_PORT", "8000"))
# A page, and the cookies this app received; /login sets one named after the app.
APP = r"""
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

class App(BaseHTTPRequestHandler):
    def do_GET(self):
        page = "<!doctype html><title>preview</title><h1>hello from a web app in the sandbox</h1>"
        page += f"<p>{sys.argv[2]} received cookies: {self.headers.get('Cookie') or 'none'}</p>\n"
        self.send_response(200)
        if self.path == "/login":
            self.send_header("Set-Cookie", f"session-{sys.argv[2]}=s3cret; Path=/; HttpOnly")
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page.encode())))
        self.end_headers()
        self.wfile.write(page.encode())

HTTPServer((sys.argv[3], int(sys.argv[1])), App).serve_forever()
"""


def browser(url: str) -> requests.Session:
    """A session that keeps cookies per origin; one that reaches *.localhost previews."""
    if (urlsplit(url).hostname or "").endswith(".localhost"):
        from createos_sync.emulator import preview_session

        return preview_session()
    return requests.Session()


def main(client: cs.Client, bind: str, hold: bool) -> None:
    with cs.lease(client=client, ingress=True) as box:
        box.write_file("/workspace/app.py", APP)
        for port, name in ((PORT, "shop"), (PORT + 1, "blog")):
            box.start(["python3", "/workspace/app.py", str(port), name, bind])
            box.wait_for_port(port, timeout=30)

        shop, blog = box.preview_url(PORT), box.preview_url(PORT + 1)
        print(f"preview URL: {shop}")
        with browser(shop) as web:
            web.get(shop + "login", timeout=30).raise_for_status()
            for url in (shop, blog):
                page = web.get(url, timeout=30)
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
        with Emulator(previews="host") as emulator, contextlib.closing(emulator.client()) as local:
            main(local, "127.0.0.1", hold)
