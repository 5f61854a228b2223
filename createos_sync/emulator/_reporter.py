"""PID 1 of a bubblewrap sandbox: runs the command and reports its exact wait status.

bubblewrap's own init can only pass on 128+N for a command killed by signal
N, which cannot be told apart from ``exit 128+N``. This script takes its
place (``bwrap --as-pid-1``): it forks and execs the command, reaps every
orphan as an init must, and writes ``{"wait-status": S}`` to the status fd
when the command ends; leaving then ends the namespace, as bubblewrap's init
would. Its source is passed to the interpreter with ``-c`` (the emulator's
installation need not be visible inside the sandbox), so it uses only the
standard library.

As the namespace's init it has no handler for SIGTERM or SIGINT, so the
kernel does not deliver those from outside: only the command sees them.

``--terminal`` (a terminal process, stdin a pty slave): the command becomes
the leader of a new session with the terminal as its controlling tty.
"""

import fcntl
import os
import signal
import sys
import termios


def main() -> None:
    terminal = sys.argv[1] == "--terminal"
    status_fd = int(sys.argv[2 if terminal else 1])
    argv = sys.argv[3 if terminal else 2 :]
    os.set_inheritable(status_fd, False)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        # Python ignores these; the command must get the defaults back.
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
        if terminal:
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
            os._exit(127 if isinstance(exc, FileNotFoundError) else 126)
    while True:
        child, status = os.wait()
        if child == pid:
            break
    os.write(status_fd, b'{"wait-status": %d}\n' % status)
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
