"""Hostile input from the caller and from the sandbox, on the real emulator, property-based.

- argv items and env values made of any text (no NUL, no lone surrogate) reach
  the process byte for byte, through the wrapper and a real bash;
- remote paths that try to climb out of the sandbox (``..``, symlinks planted
  by a command, absolute links) are refused, or land inside the sandbox's own
  storage; nothing is ever read from or written to the host;
- directory archives from the sandbox with hostile entries are refused whole,
  before anything is written, whether checked alone or served for real to
  ``download_dir``.

Each example here is real processes and real HTTP: example counts stay modest.
"""

from __future__ import annotations

import io
import os
import posixpath
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import createos_sync as cs
from createos_sync._files import _archive
from createos_sync.emulator import Emulator, Fault

from ..integration.helpers import FAST
from .ledger import Ledger
from .support import KEY, Nap, examples

REAL_PROCESSES = settings(
    max_examples=examples(10),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
# Prints its argv and the V_* variables, byte for byte, in hex.
PROBE = (
    "import os, sys; "
    "print(' '.join(os.fsencode(a).hex() for a in sys.argv[1:])); "
    "print(' '.join(k.decode() + '=' + v.hex() for k, v in sorted(os.environb.items()) "
    "if k.startswith(b'V_')))"
)
any_text = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), max_size=30
)
# Shell-hostile on purpose: quotes, expansions, newlines, escapes, glob and history.
nasty = st.text(st.sampled_from(list("'\"$`\\!*?~#;&|<>(){}[] \t\n\r\x01\x7fé€𝄞")), max_size=20)


@pytest.fixture(scope="module")
def storage_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The emulator's storage, alone in a directory of its own (with a host canary later)."""
    return tmp_path_factory.mktemp("hostile") / "root"


@pytest.fixture(scope="module")
def hostile_emulator(storage_root: Path) -> Iterator[Emulator]:
    with Emulator(rate_limit=None, transition_delay=0, api_key=KEY, root_dir=storage_root) as emu:
        yield emu
        assert emu.live_processes() == []


@pytest.fixture(scope="module")
def box(hostile_emulator: Emulator) -> Iterator[cs.Lease]:
    with (
        hostile_emulator.client(requests_per_minute=FAST, timeout=30, sleep=Nap()) as client,
        client.lease() as lease,
    ):
        yield lease
    assert hostile_emulator.live_sandboxes() == []


@pytest.fixture(scope="module")
def isolated(hostile_emulator: Emulator) -> None:
    # Without bubblewrap, /workspace in a command is the HOST's: never plant links there.
    if hostile_emulator.isolation != "bwrap":
        pytest.skip("commands must see the sandbox's own paths: needs bubblewrap isolation")


# --- argv and env ------------------------------------------------------------------------


@REAL_PROCESSES
@given(
    argv=st.lists(st.one_of(any_text, nasty), min_size=1, max_size=6),
    values=st.lists(st.one_of(any_text, nasty), max_size=4),
)
def test_any_argv_and_env_text_reaches_the_process_byte_exact(
    box: cs.Lease, ledger: Ledger, argv: list[str], values: list[str]
) -> None:
    env = {f"V_{i}": value for i, value in enumerate(values)}

    result = box.run(["python3", "-c", PROBE, *argv], env=env, check=True)

    lines = result.stdout.split("\n")
    assert lines[0] == " ".join(a.encode().hex() for a in argv)
    assert lines[1] == " ".join(f"{k}={v.encode().hex()}" for k, v in sorted(env.items()))
    ledger.add(runs=1, examples=1)


@REAL_PROCESSES
@given(script_args=st.lists(st.one_of(any_text, nasty), min_size=1, max_size=4))
def test_argv_items_are_words_of_a_bash_script_too(
    box: cs.Lease, ledger: Ledger, script_args: list[str]
) -> None:
    # The same items as positional parameters of a script run by bash itself.
    argv = ["bash", "-c", 'for a in "$@"; do printf "%s" "$a" | od -An -tx1 | tr -d " \\n"; '
            'echo; done', "name", *script_args]  # fmt: skip

    result = box.run(argv, check=True)

    assert result.stdout.splitlines() == [a.encode().hex() for a in script_args]
    ledger.add(runs=1, examples=1)


# --- remote paths --------------------------------------------------------------------------

SEGMENTS = [
    "..", ".", "", "workspace", "tmp", "home", "user", "etc", "passwd", "up", "abs", "hosttmp",
    "loop", "%2e%2e", "..%2f", "...", ". .", "..\\", "\u2024\u2024", "con", "x" * 300,
]  # fmt: skip
PLANTED = (
    "ln -sfn .. /workspace/up; ln -sfn / /workspace/abs; ln -sfn /tmp /workspace/hosttmp; "
    "ln -sfn loop /tmp/loop; mkdir -p /home/user/etc"
)


@st.composite
def remote_paths(draw: st.DrawFn) -> str:
    mount = draw(st.sampled_from(["/workspace", "/tmp", "/home/user"] * 3 + ["/", "/etc", "//tmp"]))
    plain = st.sampled_from(["a", "b", "up", "abs", "hosttmp", "loop", "etc", "..."])
    rest = draw(st.lists(st.one_of(plain, plain, st.sampled_from(SEGMENTS)), max_size=6))
    return "/".join([mount.rstrip("/"), *rest]) or "/"


def host_files(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` and its content."""
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = Path(directory) / name
            if path.is_file() and not path.is_symlink():
                found[str(path)] = path.read_bytes()
    return found


@pytest.fixture(scope="module")
def planted(box: cs.Lease, storage_root: Path, isolated: None) -> Path:
    """Symlinks a command left in the sandbox, and a host file next to the storage."""
    box.run(PLANTED, check=True)
    canary = storage_root.parent / "host-canary.txt"
    canary.write_bytes(b"host secret")
    return canary


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(path=remote_paths(), payload=st.binary(min_size=1, max_size=16))
def test_remote_paths_never_reach_outside_the_sandbox(
    box: cs.Lease,
    hostile_emulator: Emulator,
    storage_root: Path,
    planted: Path,
    ledger: Ledger,
    path: str,
    payload: bytes,
) -> None:
    assert box.id is not None
    storage = hostile_emulator.sandbox_path(box.id, "/workspace").parent
    marker = b"MARK" + os.urandom(8) + payload
    outside_before = host_files(storage_root.parent)

    try:
        box.write_file(path, marker)
    except cs.CreateosApiError as exc:
        assert exc.status in (400, 403, 404, 409), exc
        written = False
    else:
        written = True
    event("written" if written else "refused")

    # The one file holding the marker, if any, lies inside this sandbox's storage.
    holders = [p for p, data in host_files(storage_root.parent).items() if data == marker]
    if written:
        assert len(holders) == 1
        real = os.path.realpath(holders[0])
        assert real.startswith(str(storage) + os.sep), (path, real)
        # And it is the file the sandbox path names, as the sandbox would resolve it.
        normal = posixpath.normpath(path.replace("//", "/"))
        # Outside the three trees only where the sandbox has a layer (it lies in the storage).
        layered = hostile_emulator._require_store().isolation.overlays is not None
        assert layered or normal.startswith(("/workspace/", "/tmp/", "/home/user/")), normal
        assert box.read_file(path) == marker
    else:
        assert holders == []
    assert planted.read_bytes() == b"host secret"
    changed = {
        p
        for p, data in host_files(storage_root.parent).items()
        if outside_before.get(p) != data and not os.path.realpath(p).startswith(str(storage))
    }
    assert changed == set()

    # Reading by the same path never returns a host file.
    try:
        data = box.read_file(path)
    except cs.CreateosApiError as exc:
        assert exc.status in (400, 403, 404, 409)
    else:
        assert data == marker or (written is False and data != b"host secret")
    ledger.add(examples=1)


def test_escaping_reads_are_refused(
    box: cs.Lease, planted: Path, hostile_emulator: Emulator
) -> None:
    box.run(PLANTED, check=True)  # again: a write above may have replaced a link by a file
    escapes = [
        "/workspace/../../host-canary.txt",
        "/workspace/up/../host-canary.txt",
        "/workspace/abs/etc/passwd",
        "/workspace/hosttmp/" + planted.name,
        "/tmp/loop",
        "/proc/self/environ",
    ]
    if hostile_emulator._require_store().isolation.overlays is None:
        escapes.append("/etc/passwd")  # else the sandbox's own, in its layer
    for path in escapes:
        with pytest.raises(cs.CreateosApiError) as caught:
            box.read_file(path)
        assert caught.value.status in (400, 403, 404), path


# --- archives of directory trees ---------------------------------------------------------


def tar_of(entries: list[tuple[str, str, str]]) -> bytes:
    """A tar with (name, kind, link target or content) entries, written as given."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, extra in entries:
            info = tarfile.TarInfo(name)
            info.mode = 0o755 if kind == "dir" else 0o644
            if kind == "file":
                data = extra.encode()
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {
                "dir": tarfile.DIRTYPE,
                "symlink": tarfile.SYMTYPE,
                "hardlink": tarfile.LNKTYPE,
                "fifo": tarfile.FIFOTYPE,
                "device": tarfile.CHRTYPE,
            }[kind]
            info.linkname = extra
            tar.addfile(info)
    return buffer.getvalue()


NAME_PARTS = ["a", "b", "..", ".", "", "link", "dir", "/", "c d", "é"]
names = st.lists(st.sampled_from(NAME_PARTS), min_size=1, max_size=4).map("/".join)
entries = st.lists(
    st.tuples(
        names,
        st.sampled_from(["file", "dir", "symlink", "hardlink", "fifo", "device"]),
        st.one_of(names, st.sampled_from(["/etc/passwd", "../../x", "a", "link/a"])),
    ),
    min_size=1,
    max_size=6,
)


def tree(root: Path) -> set[str]:
    return {str(Path(d) / n) for d, ds, ns in os.walk(root) for n in ds + ns}


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(entries=entries)
def test_an_archive_is_refused_whole_or_extracted_inside_its_target(
    tmp_path_factory: pytest.TempPathFactory, entries: list[tuple[str, str, str]]
) -> None:
    base = tmp_path_factory.mktemp("unpack")
    (base / "outside").write_text("untouched")
    target = base / "target"

    try:
        _archive.unpack(io.BytesIO(tar_of(entries)), target)
    except cs.UnsafeArchiveError:
        # Refused: nothing was written, not even a staging directory.
        assert sorted(os.listdir(base)) == ["outside"]
        event("refused")
    else:
        event("extracted")
        real_target = os.path.realpath(target)
        for path in tree(target):
            real = os.path.realpath(path)
            assert real == real_target or real.startswith(real_target + os.sep), path
        assert sorted(os.listdir(base)) == ["outside", "target"]
    assert (base / "outside").read_text() == "untouched"


HOSTILE_ARCHIVES = {
    "dot-dot": [("ok", "file", "fine"), ("../escaped", "file", "pwned")],
    "absolute": [("/tmp/escaped", "file", "pwned")],
    "symlink-out": [("out", "symlink", "../../.."), ("out/escaped", "file", "pwned")],
    "absolute-link": [("etc", "symlink", "/etc")],
    "device": [("dev", "device", "")],
    "hardlink-out": [("h", "hardlink", "/etc/passwd")],
}


@pytest.mark.parametrize("kind", sorted(HOSTILE_ARCHIVES))
def test_download_dir_refuses_a_hostile_archive_served_for_real(
    kind: str, box: cs.Lease, hostile_emulator: Emulator, tmp_path: Path, isolated: None
) -> None:
    # The sandbox's tar runs for real; the archive it answers with is replaced by ours.
    box.run("mkdir -p /workspace/tree && echo fine > /workspace/tree/ok", check=True)
    hostile_emulator.faults.add(Fault("file.read", body=tar_of(HOSTILE_ARCHIVES[kind])))
    try:
        with pytest.raises(cs.UnsafeArchiveError, match=r"archive (entry|hard link target) "):
            box.download_dir("/workspace/tree", tmp_path / "out")
    finally:
        hostile_emulator.faults.clear()
    assert os.listdir(tmp_path) == []  # nothing extracted, nothing half-written
    assert box.id is not None
    scratch = os.listdir(hostile_emulator.sandbox_path(box.id, "/tmp"))
    assert not [n for n in scratch if n.startswith(".createos-sync-")]  # scratch removed
    box.download_dir("/workspace/tree", tmp_path / "again")  # the lease is still usable
    assert (tmp_path / "again" / "ok").read_text() == "fine\n"
