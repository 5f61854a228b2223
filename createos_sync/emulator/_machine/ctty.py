"""Make stdin (a pty slave) the controlling terminal, then exec the command.

Run as ``python -I -S ctty.py CMD...`` by a session leader whose fd 0 is the
slave, when no status reporter can do it (bubblewrap without the reporter:
see ``_terminal``). It runs from its file, never with ``-c``, and execs at
once: a host ``ps`` shows the command, not this helper. Only the standard
library is used.
"""

import fcntl
import os
import signal
import sys
import termios


def main() -> None:
    argv = sys.argv[1:]
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # Python ignores these, and ignored signals survive exec: the command gets the defaults.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


if __name__ == "__main__":
    main()
