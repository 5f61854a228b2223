"""The part of the Dockerfile language the emulator's template builds honour.

``FROM`` (one stage), ``RUN`` (shell or exec form), ``ENV``, ``WORKDIR`` and
``ARG`` are carried out; instructions that only describe an image (``LABEL``,
``EXPOSE``, ``CMD``...) are noted and skipped, since a sandbox has no
entrypoint. Anything that needs what a template build does not have (a build
context for ``COPY``/``ADD``, several stages, heredocs, another user or
shell) is a ``DockerfileError`` naming its line, so the build fails with a
clear log line instead of building something else.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from dataclasses import dataclass

CARRIED_OUT = frozenset({"FROM", "RUN", "ENV", "WORKDIR", "ARG"})
DESCRIPTIVE = frozenset(
    {"LABEL", "MAINTAINER", "EXPOSE", "CMD", "ENTRYPOINT", "VOLUME", "STOPSIGNAL", "HEALTHCHECK"}
)
REFUSED = {
    "COPY": "COPY needs a build context, which a template build does not have: "
    "create the files with RUN instead",
    "ADD": "ADD needs a build context, which a template build does not have: "
    "fetch or create the files with RUN instead",
    "USER": "USER is not supported: template steps and sandboxes run as the sandbox's user",
    "SHELL": "SHELL is not supported: RUN uses /bin/sh -c (or the exec form)",
    "ONBUILD": "ONBUILD is not supported",
}
_VARIABLE = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")


class DockerfileError(Exception):
    """An instruction the emulator cannot honour; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


@dataclass(frozen=True)
class Instruction:
    line: int
    keyword: str
    args: str

    def text(self) -> str:
        return f"{self.keyword} {self.args}".strip()


def parse(text: str) -> list[Instruction]:
    """The instructions, continuation lines joined; raises DockerfileError."""
    instructions: list[Instruction] = []
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending.append(stripped[:-1].strip())
            continue
        pending.append(stripped)
        instructions.append(_instruction(start, " ".join(p for p in pending if p)))
        pending = []
    if pending:
        instructions.append(_instruction(start, " ".join(p for p in pending if p)))
    _check_stages(instructions)
    return instructions


def _instruction(line: int, joined: str) -> Instruction:
    keyword, _, args = joined.partition(" ")
    keyword = keyword.upper()
    if keyword == "COPY" and "--from" in args:
        raise DockerfileError(line, "multi-stage builds are not supported (COPY --from)")
    if keyword in REFUSED:
        raise DockerfileError(line, REFUSED[keyword])
    if keyword not in CARRIED_OUT and keyword not in DESCRIPTIVE:
        raise DockerfileError(line, f"unknown instruction {keyword[:32]!r}")
    if keyword == "RUN" and re.search(r"<<-?['\"]?[A-Za-z_]", args):
        raise DockerfileError(line, "heredocs are not supported: write the script on one RUN")
    if keyword == "RUN" and args.startswith("--"):
        raise DockerfileError(line, "RUN options (--mount, --network...) are not supported")
    instruction = Instruction(line, keyword, args.strip())
    if keyword == "RUN":
        run_argv(instruction)  # a malformed exec form fails the build before any step runs
    return instruction


def _check_stages(instructions: list[Instruction]) -> None:
    froms = [i for i in instructions if i.keyword == "FROM"]
    if len(froms) > 1:
        raise DockerfileError(froms[1].line, "multi-stage builds are not supported: use one FROM")
    first = next((i for i in instructions if i.keyword != "ARG"), None)
    if froms and first is not froms[0]:
        assert first is not None
        raise DockerfileError(first.line, "FROM must come first")


def from_image(instruction: Instruction) -> str:
    """The image a FROM names (``--platform`` and ``AS name`` dropped)."""
    words = [w for w in instruction.args.split() if not w.startswith("--platform")]
    if not words:
        raise DockerfileError(instruction.line, "FROM names no image")
    if len(words) not in (1, 3) or (len(words) == 3 and words[1].upper() != "AS"):
        raise DockerfileError(instruction.line, "FROM takes one image (and AS name)")
    return words[0]


def run_argv(instruction: Instruction) -> list[str]:
    """RUN's command: the exec form's argv, or the shell form under /bin/sh -c."""
    if instruction.args.startswith("["):
        try:
            argv = json.loads(instruction.args)
        except ValueError:
            argv = None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise DockerfileError(instruction.line, "RUN's exec form must be a JSON list of str")
        return argv
    if not instruction.args:
        raise DockerfileError(instruction.line, "RUN has no command")
    return ["/bin/sh", "-c", instruction.args]


def assignments(instruction: Instruction, known: dict[str, str]) -> dict[str, str]:
    """ENV's or ARG's ``K=V`` pairs (``ENV K V`` too; ARG K alone defaults to empty)."""
    try:
        words = shlex.split(instruction.args)
    except ValueError as exc:
        raise DockerfileError(instruction.line, f"{instruction.keyword}: {exc}") from None
    if not words:
        raise DockerfileError(instruction.line, f"{instruction.keyword} sets nothing")
    if instruction.keyword == "ENV" and "=" not in words[0]:
        return {_name(instruction, words[0]): substitute(" ".join(words[1:]), known)}
    pairs: dict[str, str] = {}
    for word in words:
        name, sep, value = word.partition("=")
        if not sep and instruction.keyword == "ENV":
            raise DockerfileError(instruction.line, "ENV takes K=V pairs")
        pairs[_name(instruction, name)] = substitute(value, {**known, **pairs})
    return pairs


def _name(instruction: Instruction, name: str) -> str:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise DockerfileError(instruction.line, f"{instruction.keyword}: invalid name {name!r}")
    return name


def workdir(instruction: Instruction, current: str, known: dict[str, str]) -> str:
    """The directory WORKDIR moves to (relative to the current one)."""
    target = substitute(instruction.args, known)
    if not target:
        raise DockerfileError(instruction.line, "WORKDIR names no directory")
    return posixpath.normpath(posixpath.join(current, target))


def substitute(text: str, known: dict[str, str]) -> str:
    """``$NAME`` and ``${NAME}`` replaced by their values (unknown: empty), as Docker does."""
    return _VARIABLE.sub(lambda m: known.get(m.group(1) or m.group(2), ""), text)
