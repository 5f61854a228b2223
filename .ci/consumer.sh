#!/usr/bin/env bash
# The package where users install it (issue 20). Our own test environment has every extra
# and pytest-xdist, so it cannot see what a user sees: this builds the wheel once, installs
# it (not editable) into fresh virtual environments holding only what a user would add,
# and checks there. One line per check ("ok: ..."); the first failure stops the script
# with what went wrong and the output of the step that failed.
#
#   bash .ci/consumer.sh        # locally or in CI; needs python3 >= 3.10 and Python 3.10
#                               # (pyenv's or python3.10 on PATH) for the oldest-deps check
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d "${TMPDIR:-/tmp}/consumer.XXXXXX")
killtree() {  # killtree PID: that process and its descendants (pip runs pip under --python)
  local child
  for child in $(pgrep -P "$1" || true); do killtree "$child"; done
  kill "$1" 2>/dev/null || true
}
cleanup() {
  local job
  for job in $(jobs -p); do killtree "$job"; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
started=$SECONDS

ok() { printf 'ok: %s [%ss]\n' "$*" "$((SECONDS - started))"; }
fail() {  # fail MESSAGE [LOG]: say what went wrong, show the step's output, stop
  printf 'FAIL: %s\n' "$1" >&2
  if [[ -n ${2:-} && -s $2 ]]; then sed 's/^/  | /' "$2" | tail -n 80 >&2; fi
  exit 1
}
fresh_home() { mktemp -d "$work/home.XXXXXX"; }

interpreter() {  # interpreter 3.10: a working python3.10 (pyenv's, else PATH's), or nothing
  local p
  for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python"$1" \
    "$(command -v "python$1" || true)"; do
    if [[ -x $p ]] && "$p" -c 'import sys' >/dev/null 2>&1; then
      echo "$p"
      return
    fi
  done
}
py=$(command -v python3)
"$py" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || fail "python3 is older than 3.10"
oldest=$(interpreter 3.10)
[[ -n $oldest ]] || fail "no Python 3.10 here (pyenv install 3.10, or python3.10 on PATH)"
newer=()
for v in 3.12 3.13; do
  p=$(interpreter "$v")
  [[ -z $p ]] || newer+=("$p")
done

# strace sees every socket, the interpreter's own and C code's; apt-get brings it where it can.
if ! command -v strace >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [[ $EUID == 0 ]]; then
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace \
    || { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q strace; }; } \
    >"$work/apt.log" 2>&1 || true
fi

# --- the wheel, built once from a clean copy (a stale build/ must not leak into it) -------
mkdir -p "$work/src" "$work/dist"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  # what a clean clone would hold, with this working tree's edits (deleted files left out)
  git ls-files -z --cached --others --exclude-standard \
    | (cd "$root" && xargs -0 -r sh -c 'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh) \
    | tar -c --null -T - -f - | tar -x -C "$work/src"
else
  tar -c --exclude='./.git' --exclude='./build' --exclude='*.egg-info' --exclude='./.venv*' \
    --exclude='__pycache__' -f - . | tar -x -C "$work/src"
fi
"$py" -m pip wheel -q --no-deps -w "$work/dist" "$work/src" >"$work/build.log" 2>&1 \
  || fail "pip wheel could not build the package" "$work/build.log"
wheels=("$work"/dist/createos_sync-*.whl)
((${#wheels[@]} == 1)) && [[ -f ${wheels[0]} ]] || fail "expected one wheel in dist, got: ${wheels[*]}"
wheel=${wheels[0]}

# 1. what the wheel holds
"$py" - "$wheel" "$work/src" >"$work/wheel.log" 2>&1 <<'EOF' || fail "the wheel's contents" "$work/wheel.log"
import sys, zipfile
from pathlib import Path

wheel, src = sys.argv[1], Path(sys.argv[2])
names = set(zipfile.ZipFile(wheel).namelist())
problems = []
dist_info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
tops = {n.split("/")[0] for n in names} - dist_info
# createos_sync_pytest: the pytest11 entry point, a package of its own so that loading
# the plugin imports pytest alone, not createos_sync (which imports the whole SDK).
packages = {"createos_sync", "createos_sync_pytest"}
if tops != packages or len(dist_info) != 1:
    problems.append(f"top level is {sorted(tops | dist_info)}, not {sorted(packages)} and a dist-info")
source = {str(p.relative_to(src)) for top in packages for p in (src / top).rglob("*")
          if p.is_file() and "__pycache__" not in p.parts}
package = {n for n in names if n.split("/")[0] in packages}
if "createos_sync/py.typed" not in package:
    problems.append("no createos_sync/py.typed: type checkers would ignore the annotations")
if source - package:
    problems.append(f"missing from the wheel: {sorted(source - package)}")
if package - source:
    problems.append(f"in the wheel but not in the source (stale?): {sorted(package - source)}")
tests = sorted(n for n in names if "tests/" in n or Path(n).name.startswith("test_")
               or Path(n).name == "conftest.py")
if tests:
    problems.append(f"tests in the wheel: {tests}")
(info,) = dist_info
entry_points = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
for line in ("createos = createos_sync_pytest", "createos-sync = createos_sync.cli:main"):
    if line not in entry_points:
        problems.append(f"entry point missing: {line}")
if problems:
    sys.exit("\n".join(problems))
print(f"{len(package)} files")
EOF
ok "1. the wheel holds the package ($(cat "$work/wheel.log")) and py.typed, no tests, both entry points"

# --- fresh virtual environments, made in parallel ------------------------------------------
# floors.txt: every runtime requirement (and the emulator extra's) pinned at its floor
"$py" - "$wheel" >"$work/floors.txt" 2>"$work/floors.log" <<'EOF' || fail "reading the floors" "$work/floors.log"
import re, sys, zipfile
from email.parser import Parser

zf = zipfile.ZipFile(sys.argv[1])
meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
for req in Parser().parsestr(zf.read(meta).decode()).get_all("Requires-Dist") or []:
    spec, _, marker = req.partition(";")
    if marker and "extra ==" in marker and "'emulator'" not in marker and '"emulator"' not in marker:
        continue
    # A floor (>=X), and at most an upper bound beside it (<Y: urllib3's and werkzeug's, see pyproject).
    m = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*\(?([^)]*)\)?\s*", spec)
    clauses = [c.strip() for c in m[2].split(",")] if m else []
    floors = [c[2:].strip() for c in clauses if c.startswith(">=")]
    if len(floors) != 1 or not all(c.startswith((">=", "<")) for c in clauses):
        sys.exit(f"no plain floor (>=X) to pin in {req!r}")
    print(f"{m[1]}=={floors[0]}")
EOF

# Made without pip (nor the setuptools an old ensurepip adds, which could hide a missing
# dependency); this pip installs into them (--python), which is also faster.
[[ $("$py" -m pip --help) == *--python* ]] || fail "pip >= 22.3 needed (pip --python)"
venv() {  # venv NAME PYTHON REQUIREMENT...: a fresh virtual environment with just these
  local name=$1 python=$2
  shift 2
  { "$python" -m venv --without-pip "$work/$name" \
    && "$py" -m pip --python "$work/$name/bin/python" install -q "$@"; } >"$work/$name.log" 2>&1
}
declare -A pending=()
venv user "$py" "$wheel" pytest & pending[user]=$!
# (no .pyc compiled ahead where check 3 does not look: the kernel's packages are large)
venv emu "$py" --no-compile "$wheel[emulator]" pytest & pending[emu]=$!
venv nb "$py" --no-compile "$wheel[emulator]" nbclient ipykernel & pending[nb]=$!
venv oldest "$oldest" "$wheel[emulator]" pytest responses hypothesis anyio -c "$work/floors.txt" &
pending[oldest]=$!
for i in "${!newer[@]}"; do
  venv "newer$i" "${newer[$i]}" "$wheel" pytest & pending[newer$i]=$!
done
ready() {  # ready NAME: wait until that environment is installed
  [[ -n ${pending[$1]:-} ]] || return 0
  wait "${pending[$1]}" || fail "installing the wheel into the '$1' environment" "$work/$1.log"
  unset "pending[$1]"
}
version() { "$work/$1/bin/python" -c 'import platform; print(platform.python_version())'; }

# 2. an unrelated test file passes with only pytest beside the wheel (the plugin loaded, inert)
mkdir -p "$work/project"
printf 'def test_x():\n    assert 1\n' >"$work/project/test_a.py"
for env in user "${!newer[@]}"; do
  [[ $env == user ]] || env=newer$env
  ready "$env"
  (cd "$work/project" && HOME=$(fresh_home) "$work/$env/bin/python" -m pytest -p no:cacheprovider) \
    >"$work/t2.log" 2>&1 || fail "2. a user's unrelated test fails with the wheel installed ($(version "$env"))" "$work/t2.log"
  grep -q '^plugins:.*createos' "$work/t2.log" \
    || fail "2. pytest did not load the plugin ($(version "$env"))" "$work/t2.log"
  grep -q ' 1 passed in ' "$work/t2.log" || fail "2. the user's test did not pass ($(version "$env"))" "$work/t2.log"
  if [[ $env == user ]]; then
    "$work/user/bin/python" -c 'import xdist' >/dev/null 2>&1 && fail "2. xdist is in the user's venv"
  fi
  versions2+=("$(version "$env")")
done
ok "2. a user's unrelated test passes beside the wheel with only pytest (Python ${versions2[*]})"

# 3. importing the package is silent and inert: no output, nothing written, no socket
mkdir -p "$work/audit"
cat >"$work/audit/sitecustomize.py" <<'EOF'
# Installed on PYTHONPATH for one import: records what the interpreter is asked to do
# (sockets, subprocesses, files opened for writing) through audit hooks.
import os
import sys

_log = open(os.environ["CONSUMER_AUDIT_LOG"], "a", encoding="utf-8")
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
_SOCKET_PY = os.path.join(os.path.dirname(os.__file__), "socket.py")
_IPV6_PROBE = os.path.join("urllib3", "util", "connection.py")


def _caller():
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == _SOCKET_PY:
        frame = frame.f_back
    return frame.f_code.co_filename if frame is not None else "?"


def _hook(event, args):
    if event in {"socket.__new__", "socket.bind"} and _caller().endswith(_IPV6_PROBE):
        return  # urllib3's import-time probe: a socket bound to ::1, never connected
    if event.startswith("socket.") or event.split(".")[0] == "subprocess" or event in {
        "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
        "os.mkdir", "os.rename", "os.remove", "os.rmdir", "shutil.rmtree",
    }:
        _log.write(f"{event} {args!r} from {_caller()}\n")
    elif event == "open":
        path, mode, flags = args
        if (isinstance(mode, str) and set(mode) & set("wax+")) or (flags or 0) & _WRITE:
            _log.write(f"open for writing {path!r} {mode!r}\n")
    _log.flush()


sys.addaudithook(_hook)
EOF
tracer=()
if command -v strace >/dev/null 2>&1 && strace -f -qq -o /dev/null true >/dev/null 2>&1; then
  tracer=(strace -f -qq -e signal=none -e trace=socket,socketpair,connect,bind -o "$work/strace.log")
fi
for env in user oldest "${!newer[@]}"; do
  [[ $env == user || $env == oldest ]] || env=newer$env
  ready "$env"
  home=$(fresh_home)
  : >"$work/audit.log"
  (cd "$work/project" && env -u XDG_CACHE_HOME -u XDG_CONFIG_HOME -u XDG_DATA_HOME \
    -u XDG_STATE_HOME -u XDG_RUNTIME_DIR -u CREATEOS_SYNC_STATE_DIR HOME="$home" \
    PYTHONPATH="$work/audit" CONSUMER_AUDIT_LOG="$work/audit.log" \
    ${tracer[@]+"${tracer[@]}"} "$work/$env/bin/python" -W error -c "import createos_sync, createos_sync.cli") \
    >"$work/t3.log" 2>&1 || fail "3. import createos_sync, createos_sync.cli fails under -W error ($(version "$env"))" "$work/t3.log"
  [[ ! -s $work/t3.log ]] || fail "3. importing the package printed something ($(version "$env"))" "$work/t3.log"
  find "$home" -mindepth 1 >"$work/home.log"
  [[ ! -s $work/home.log ]] || fail "3. importing the package wrote under \$HOME ($(version "$env"))" "$work/home.log"
  [[ ! -s $work/audit.log ]] || fail "3. importing the package did something (audit hook, $(version "$env"))" "$work/audit.log"
  if ((${#tracer[@]})); then
    # allowed: urllib3's probe at import (any `import requests` makes it), one IPv6 socket
    # bound to ::1 and never connected; the audit hook above checked that urllib3 made it
    probe='^[0-9]+ +(socket\(AF_INET6, SOCK_STREAM[|A-Z_]*, IPPROTO_IP\) = [0-9]+|bind\([0-9]+, \{sa_family=AF_INET6, sin6_port=htons\(0\), .*inet_pton\(AF_INET6, "::1", .*\) = 0)$'
    if (($(grep -c 'socket(' "$work/strace.log" || true) > 1)); then probe='^$'; fi
    grep -E '(socket|socketpair|connect|bind)\(' "$work/strace.log" | grep -vE "$probe" >"$work/sockets.log" || true
    [[ ! -s $work/sockets.log ]] || fail "3. importing the package opened a socket ($(version "$env"))" "$work/strace.log"
  fi
  versions3+=("$(version "$env")")
done
how="audit hook${tracer[*]:+ and strace}"
ok "3. import createos_sync, createos_sync.cli under -W error: silent, nothing under a fresh \$HOME, no file written, no subprocess, no socket but urllib3's IPv6 probe (bound to ::1, never connected) ($how; Python ${versions3[*]})"

# 7. the unit tests on the oldest Python, every runtime dependency at its floor (in the
# background while 4-6 run; its line comes last)
"$work/oldest/bin/python" - "$work/floors.txt" >"$work/t7.log" 2>&1 <<'EOF' \
  || fail "7. the oldest environment does not hold the floors" "$work/t7.log"
import sys
from importlib.metadata import version

def release(text):
    parts = [int(p) for p in text.split(".")]
    return parts + [0] * (4 - len(parts))

for line in open(sys.argv[1]):
    name, floor = line.strip().split("==")
    if release(version(name)) != release(floor):
        sys.exit(f"{name} {version(name)} installed, not its floor {floor}")
EOF
mkdir -p "$work/unit"
cp -r tests pyproject.toml "$work/unit/"  # the suite and its configuration, not the source:
# createos_sync comes from the installed wheel
(cd "$work/unit" && HOME=$(fresh_home) "$work/oldest/bin/python" -m pytest -q -p no:cacheprovider \
  tests/unit) >"$work/t7.log" 2>&1 &
unit_tests=$!

# 4. the plugin's fixtures on the emulator, with [emulator] and pytest only (no xdist)
ready emu
"$work/emu/bin/python" -c 'import xdist' >/dev/null 2>&1 && fail "4. xdist is in the [emulator] venv"
mkdir -p "$work/plugin"
cp examples/test_with_sandboxes.py "$work/plugin/"
count=$(grep -c '^def test_' "$work/plugin/test_with_sandboxes.py")
(cd "$work/plugin" && HOME=$(fresh_home) "$work/emu/bin/python" -m pytest -q -p no:cacheprovider) \
  >"$work/t4.log" 2>&1 || fail "4. examples/test_with_sandboxes.py fails from the wheel without xdist" "$work/t4.log"
grep -Eq "^$count passed" "$work/t4.log" || fail "4. expected $count tests to pass" "$work/t4.log"
ok "4. the plugin's fixtures work on the emulator with [emulator] and pytest only: examples/test_with_sandboxes.py, $count passed"

# 5. the README's main job ("Try it on a fresh machine") and the quickstart, from the wheel
"$py" - README.md >"$work/try.cmd" 2>"$work/try.log" <<'EOF' || fail "5. the README's Try it command" "$work/try.log"
import re, sys

section = open(sys.argv[1]).read().split("## Try it on a fresh machine", 1)[1].split("\n## ", 1)[0]
command = re.findall(r"```sh\n(.*?)```", section, re.S)[0].strip()
setup, sep, job = command.partition("pip install -e '.[emulator]' && ")
if not sep or not re.fullmatch(r"python3 -m venv (\S+) && \. \1/bin/activate && ", setup):
    sys.exit(f"the Try it command is no longer venv, pip install -e '.[emulator]', job: {command}")
print(job)
EOF
job=$(cat "$work/try.cmd")
(cd "$work/project" && HOME=$(fresh_home) PATH="$work/emu/bin:$PATH" bash -c "$job") \
  >"$work/t5.out" 2>"$work/t5.log" || fail "5. the README's main job fails from the wheel: $job" "$work/t5.log"
[[ $(cat "$work/t5.out") == 42 ]] || fail "5. the README's main job did not print 42: $job" "$work/t5.out"
mkdir -p "$work/quickstart"
cp examples/quickstart.py "$work/quickstart/"
(cd "$work/quickstart" && env -u CREATEOS_API_KEY HOME=$(fresh_home) "$work/emu/bin/python" quickstart.py) \
  >"$work/t5q.log" 2>&1 || fail "5. examples/quickstart.py fails from the wheel" "$work/t5q.log"
grep -q '^round trip$' "$work/t5q.log" || fail "5. examples/quickstart.py did not round-trip its file" "$work/t5q.log"
ok "5. the README's main job ($job) prints 42 from the wheel, and examples/quickstart.py runs"

# 6. progress=True in a Jupyter kernel without ipywidgets: a text bar, no warning
ready nb
"$work/nb/bin/python" -c 'import ipywidgets' >/dev/null 2>&1 && fail "6. ipywidgets is in the notebook venv"
(cd "$work/project" && HOME=$(fresh_home) JUPYTER_PLATFORM_DIRS=1 "$work/nb/bin/python" - >"$work/t6.log" 2>&1 <<'EOF'
import nbclient, nbformat
from nbformat.v4 import new_code_cell, new_notebook

cells = [
    "import createos_sync as cs\n"
    "from createos_sync.emulator import Emulator\n"
    "emulator = Emulator().start()\n"
    "client = emulator.client()",
    "def work(box, n):\n"
    "    return box.run(f'echo {n}').stdout.strip()\n"
    "print(cs.map(work, [1, 2], client=client, concurrency=2, progress=True))",
    "with cs.lease(client=client) as box:\n"
    "    box.write_file('/workspace/data.bin', b'x' * 300_000, progress=True)\n"
    "    box.download('/workspace/data.bin', 'data.bin', progress=True)",
    "client.close()\nemulator.close()",
]
notebook = new_notebook(cells=[new_code_cell(c) for c in cells])
nbclient.NotebookClient(
    notebook, timeout=120, startup_timeout=120, kernel_name="python3"
).execute()
outputs = [o for cell in notebook.cells for o in cell.outputs]
stderr = "".join(o.get("text", "") for o in outputs if o.get("name") == "stderr")
stdout = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
print("stdout:", stdout)
print("stderr:", stderr)
others = [o for o in outputs if o.output_type != "stream"]
assert not others, f"outputs other than text: {others}"
assert stdout == "['1', '2']\n", "cs.map's result"
assert "warn" not in stderr.lower() and "IProgress" not in stderr, "a warning in the cells' output"
for label in ("cs.map", "write /workspace/data.bin", "download /workspace/data.bin"):
    assert label in stderr, f"no progress display for {label}"
EOF
) || fail "6. progress=True in a Jupyter kernel without ipywidgets" "$work/t6.log"
ok "6. in a Jupyter kernel without ipywidgets, cs.map and file transfers with progress=True show a text bar and no warning"

# 6b. %%createos in a Jupyter kernel: the example notebook shows a figure drawn in the sandbox
# (on the emulator the sandbox's python3 is the host's: .ci/run installs its matplotlib)
if /usr/bin/python3 -c 'import matplotlib' >/dev/null 2>&1; then
  (cd "$work/project" && env -u CREATEOS_API_KEY HOME=$(fresh_home) JUPYTER_PLATFORM_DIRS=1 \
    "$work/nb/bin/python" - "$root/examples/code_interpreter.ipynb" >"$work/t6b.log" 2>&1 <<'EOF'
import base64, sys
import nbclient, nbformat

notebook = nbformat.read(sys.argv[1], as_version=4)
nbclient.NotebookClient(
    notebook, timeout=120, startup_timeout=120, kernel_name="python3"
).execute()
outputs = [o for cell in notebook.cells for o in cell.get("outputs", [])]
assert not [o for o in outputs if o.output_type == "error"], "an error in the notebook"
pngs = [o.data["image/png"] for o in outputs if "image/png" in o.get("data", {})]
assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(b"\x89PNG"), "no inline PNG"
EOF
  ) || fail "6b. examples/code_interpreter.ipynb in a Jupyter kernel" "$work/t6b.log"
  ok "6b. examples/code_interpreter.ipynb runs in a Jupyter kernel: %%createos shows a PNG drawn in the sandbox"
else
  echo "skipped: 6b. the host's python3 has no matplotlib for the sandbox's figure"
fi

wait "$unit_tests" || fail "7. the unit tests fail on Python $(version oldest) with $(tr '\n' ' ' <"$work/floors.txt")" "$work/t7.log"
passed=$(grep -Eo '[0-9]+ passed' "$work/t7.log" | tail -n 1)
ok "7. the unit tests pass on Python $(version oldest) with $(tr '\n' ' ' <"$work/floors.txt")($passed)"

echo "consumer checks: all passed in $((SECONDS - started))s"
