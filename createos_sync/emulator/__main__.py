"""``python -m createos_sync.emulator``: serve the emulator in the foreground.

While it serves, its URL and key are recorded in the state directory
(``createos_sync.standalone``), so that ``createos-sync ... --local``
finds it and ``eval "$(createos-sync emulator --env)"`` points another shell at it.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import shlex
import signal
import sys
import threading
from types import FrameType

from ..standalone import announced, choice_note, find
from ._service.server import Emulator


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Serve a local CreateOS emulator until SIGINT or SIGTERM. While it "
        "serves, `createos-sync COMMAND --local` uses it, and in another shell "
        '`eval "$(createos-sync emulator --env)"` exports its URL and key.',
    )
    parser.add_argument(
        "--env",
        action="store_true",
        help="print the export lines of the emulator already serving (for eval) and exit",
    )
    parser.add_argument("--host", default="127.0.0.1", help="loopback address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    parser.add_argument("--api-key", default=None, help="API key (default: a random one)")
    parser.add_argument("--isolation", choices=("auto", "bwrap", "none"), default="auto")
    parser.add_argument(
        "--network",
        choices=("auto", "private", "shared"),
        default="auto",
        help="a network namespace per sandbox (private), or the host's (shared)",
    )
    parser.add_argument(
        "--previews",
        choices=("auto", "host", "path"),
        default="auto",
        help="preview URLs: an origin per sandbox port (http://PORT-ID.sb.localhost:...) or one "
        "path prefix (default: host where this machine resolves *.localhost)",
    )
    parser.add_argument("--no-rate-limit", action="store_true", help="disable the 300/min limit")
    parser.add_argument(
        "--tls", action="store_true", help="serve HTTPS (a throwaway CA; its path is printed)"
    )
    parser.add_argument(
        "--journal-bytes", type=int, default=1 << 20, help="output journal per process (bytes)"
    )
    return parser


def main(argv: list[str] | None = None, *, prog: str = "python -m createos_sync.emulator") -> int:
    """Run the emulator until SIGINT/SIGTERM; returns the exit status.

    ``prog`` is the name its help and errors show (``createos-sync emulator``
    when the command line delegates here).
    """
    args = _parser(prog).parse_args(argv)
    if args.env:
        return _print_exports(prog)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    try:
        emulator = Emulator(
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            isolation=args.isolation,
            network=args.network,
            rate_limit=None if args.no_rate_limit else 300,
            journal_bytes=args.journal_bytes,
            frame_bytes=min(64 * 1024, max(1, args.journal_bytes)),
            tls=args.tls,
            previews=args.previews,
        )
        emulator.start()
    except (ValueError, RuntimeError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    announcement = contextlib.ExitStack()
    try:
        print(f"CreateOS emulator listening on {emulator.url}")
        print(f"isolation: {emulator.isolation}")
        url, key = shlex.quote(emulator.url), shlex.quote(emulator.api_key)
        exports = f"CREATEOS_API_URL={url} CREATEOS_SANDBOX_BASE_URL={url} "
        if emulator.ca_path is not None:
            print(f"CA certificate: {emulator.ca_path}")
            exports += f"CREATEOS_CA_BUNDLE={shlex.quote(emulator.ca_path)} "
        print(f"export {exports}CREATEOS_API_KEY={key} CREATEOS_SANDBOX_API_KEY={key}", flush=True)
        already = find()
        announcement = _announce(emulator)  # after the lines a script reads first
        if already is not None:
            print(
                f"another emulator serves at {already.describe()}: `--local` commands use the "
                "newest (this one) until it stops, then that one again",
                flush=True,
            )
        print(f"network: {emulator.describe_network()}", flush=True)
        print(f"preview URLs: {emulator.previews} form", flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        announcement.close()
        emulator.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0


def _announce(emulator: Emulator) -> contextlib.ExitStack:
    """Record the emulator for ``--local`` and ``--env`` until the stack closes (if the state
    directory can be written: else say so, and serve all the same)."""
    stack = contextlib.ExitStack()
    try:
        path = stack.enter_context(announced(emulator.url, emulator.api_key, emulator.ca_path))
    except OSError as exc:
        print(f"not recorded for --local ({exc.strerror}): export the line below", flush=True)
    else:
        print(
            f"recorded in {path}: `createos-sync COMMAND --local` uses it; in another "
            'shell, eval "$(createos-sync emulator --env)"',
            flush=True,
        )
    return stack


def _print_exports(prog: str) -> int:
    found = find()
    if found is None:
        print(
            f"{prog}: no emulator is serving: start one with `{prog}` (in another terminal)",
            file=sys.stderr,
        )
        return 1
    note = choice_note(found)
    if note is not None:
        print(f"{prog}: {note}", file=sys.stderr)
    print(found.exports(), end="", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
