"""The init of one sandboxed command: runs it, reports its exact wait status, reaps orphans.

Two roles, one file (run as ``python -I -S reporter.py ...``, never with
``-c``: a host ``ps`` then shows this short path and the user's command, not
a page of source):

- ``reporter.py STATUS_FD CMD...``: PID 1 of a bubblewrap sandbox
  (``bwrap --as-pid-1``; the file is bind-mounted read-only into the sandbox,
  so the emulator's installation need not be visible there). bubblewrap's
  own init can only pass on 128+N for a command killed by signal N, which
  cannot be told apart from ``exit 128+N``. This one forks and execs the
  command, reaps every orphan as an init must, and writes
  ``{"wait-status": S}`` to the status fd when the command ends; it then
  stays, reaping, until the last process of the namespace has ended, so
  that what a command left running (``nohup server &``) lives on, as on
  the service, where a sandbox's processes outlive the command that started
  them and end with the sandbox (the emulator kills the namespace then;
  leaving ends it, as bubblewrap's init would). As the namespace's
  init it has no handler for SIGTERM or SIGINT, so the kernel does not
  deliver those from outside: only the command sees them.

- ``reporter.py --subreaper EMULATOR_PID STATUS_FD CMD...``: the leader of
  a command without isolation. It makes itself a child subreaper
  (``PR_SET_CHILD_SUBREAPER``), so every descendant that loses its parent
  is adopted by it instead of by the host's init: a command that escapes
  its session (``setsid sleep 63 &``) stays in the tree, where the emulator
  finds and kills it. It reports the command's wait status as above, then
  stays until its last descendant is gone. Signals meant for the command's
  group (``kill 0``) do not end it; the death of the emulator does
  (``PR_SET_PDEATHSIG``, even after ``kill -9``): it then kills every
  descendant and leaves.

``--terminal`` (either role, before STATUS_FD; a terminal process, whose
stdin is a pty slave): in the child it forks, the command becomes the leader
of a new session with the terminal as its controlling tty, so that Ctrl-C
typed on it and a resize reach the command's foreground group. The
subreaper itself stays in its own session, out of the terminal's reach.

Only the standard library is used.
"""

import ctypes
import fcntl
import os
import signal
import sys
import termios

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
# What a subreaper ignores unless its emulator died: a command's `kill 0` reaches it too.
SHIELDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), f"prctl({option}) failed")


def _descendants(root: int) -> list[int]:
    """Live descendants of ``root`` (zombies left out), from /proc."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in (b"Z", b"X"):
            children.setdefault(int(fields[1]), []).append(int(name))
    found, pending = [], [root]
    while pending:
        for child in children.get(pending.pop(), []):
            found.append(child)
            pending.append(child)
    return found


def _kill_all_and_leave() -> None:
    """SIGKILL every descendant, reaping the adopted ones, until none is left."""
    while True:
        for pid in _descendants(os.getpid()):
            try:  # noqa: SIM105 - not contextlib: this starts once per command, imports cost
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            os._exit(137)


def _become_subreaper(emulator: int) -> None:
    def on_signal(signum: int, frame: object) -> None:
        if os.getppid() != emulator:  # the emulator died: nothing may outlive it
            _kill_all_and_leave()

    for signum in SHIELDED:
        signal.signal(signum, on_signal)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != emulator:  # it died before the line above
        _kill_all_and_leave()


def _exec(argv: list[str], shielded: bool, terminal: bool) -> None:
    """In the child: the defaults back (Python ignores some), the terminal, then the command."""
    for signum in (signal.SIGPIPE, signal.SIGXFSZ, *(SHIELDED if shielded else ())):
        signal.signal(signum, signal.SIG_DFL)
    if terminal:
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    # Only stdin, stdout and stderr: what the emulator handed bubblewrap (the user
    # namespace's descriptor, a disk's directory) is not the command's to hold.
    os.closerange(3, os.sysconf("SC_OPEN_MAX"))
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        os.write(2, f"{argv[0]}: {exc.strerror}\n".encode())
        os._exit(127 if isinstance(exc, FileNotFoundError) else 126)


def main() -> None:
    args = sys.argv[1:]
    subreaper = args[0] == "--subreaper"
    if subreaper:
        _become_subreaper(int(args[1]))
        args = args[2:]
    terminal = args[0] == "--terminal"
    if terminal:
        args = args[1:]
    status_fd, argv = int(args[0]), args[1:]
    os.set_inheritable(status_fd, False)
    if not subreaper:  # an init without a handler: the kernel keeps SIGINT from outside away
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    pid = os.fork()
    if pid == 0:
        _exec(argv, subreaper, terminal)
    if subreaper:  # its pipes belong to the command: their ends are the command's to close
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
    while True:
        child, status = os.wait()
        if child == pid:
            break
    os.write(status_fd, b'{"wait-status": %d}\n' % status)
    os.close(status_fd)
    try:
        while True:  # orphans (adopted, or the namespace's): the tree lives until the last ends
            os.wait()
    except ChildProcessError:
        pass
    code = os.waitstatus_to_exitcode(status)
    sys.exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
