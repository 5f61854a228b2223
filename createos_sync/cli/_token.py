"""``createos-sync token create|rotate|disable SANDBOX_ID``: a key for one sandbox.

The token is printed once, on stdout alone (so that ``TOKEN=$(createos-sync
token create ID)`` captures it and nothing else); every message goes to
stderr, and none holds the token. It is not a lease: the token stays valid
until it is rotated or disabled, or its sandbox is destroyed.
"""

from __future__ import annotations

import argparse
import sys

from ._local import account, add_local_flag
from ._report import UsageError, say

HINT = "see `createos-sync token --help`"


def add_parser(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    parser = commands.add_parser(
        "token",
        parents=[common],
        help="make, rotate or disable a sandbox's access token",
        description="A sandbox access token drives that sandbox and nothing else "
        "(CREATEOS_API_KEY=TOKEN createos-sync ...). It is printed once, on stdout.",
    )
    actions = parser.add_subparsers(dest="token_action", required=True, metavar="ACTION")
    for action, what in (
        ("create", "make the sandbox's access token and print it (once)"),
        ("rotate", "replace it (the old one stops working) and print the new one"),
        ("disable", "revoke it"),
    ):
        sub = actions.add_parser(action, parents=[common], help=what, description=what)
        sub.add_argument("sandbox_id", metavar="SANDBOX_ID")
        add_local_flag(sub)
        sub.set_defaults(handler=token)


def token(args: argparse.Namespace) -> int:
    """1 request."""
    sandbox_id = args.sandbox_id
    if not sandbox_id.strip() or not sandbox_id.isprintable() or "/" in sandbox_id:
        raise UsageError("SANDBOX_ID must be a sandbox id such as sb-...", hint=HINT)
    with account(local=args.local) as client:
        if args.token_action == "disable":
            client.disable_access_token(sandbox_id)
            say(f"the access token of sandbox {sandbox_id} is disabled")
            return 0
        if args.token_action == "create":
            plaintext = client.create_access_token(sandbox_id)
        else:
            plaintext = client.rotate_access_token(sandbox_id)
    sys.stdout.write(f"{plaintext}\n")
    sys.stdout.flush()
    say(f"that is the access token of sandbox {sandbox_id}: it is shown only once")
    return 0
