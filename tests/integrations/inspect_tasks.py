"""Tiny Inspect tasks whose solver and scorer use the sandbox (run by test_inspect_eval.py)."""

from __future__ import annotations

import os
from pathlib import Path

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import CORRECT, INCORRECT, Score, Target, accuracy, scorer
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import ExecStdout, sandbox

SAMPLES = [Sample(input=f"sample number {i}", target=f"SAMPLE NUMBER {i}", id=i) for i in range(3)]


@solver
def shout() -> Solver:
    """Writes the input into the sandbox, upper-cases it there, and answers with that."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().write_file("input.txt", state.input_text)
        result = await sandbox().exec(["sh", "-c", "tr a-z A-Z < input.txt > answer.txt"])
        assert result.success, result.stderr
        state.output.completion = await sandbox().read_file("answer.txt")
        return state

    return solve


@solver
def hang() -> Solver:
    """Says (on the host) that its sandbox exists, then waits in it for a long time."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        marker = Path(os.environ["INSPECT_TASK_MARKERS"]) / f"sample-{state.sample_id}"
        marker.touch()
        await sandbox().exec(["sleep", "600"])
        return state

    return solve


@solver
def stream() -> Solver:
    """Streams a command's output through ``exec_remote`` (Inspect's injected tools)."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        process = await sandbox().exec_remote(
            ["sh", "-c", f"for w in {state.input_text}; do echo $w; done"]
        )
        chunks = [event.data async for event in process if isinstance(event, ExecStdout)]
        words = "".join(chunks).split()  # a chunk may hold several lines, or part of one
        await sandbox().write_file("answer.txt", " ".join(words).upper())
        return state

    return solve


@scorer(metrics=[accuracy()])
def in_sandbox():  # type: ignore[no-untyped-def]
    """Correct when the sandbox's answer.txt holds the target."""

    async def score(state: TaskState, target: Target) -> Score:
        answer = await sandbox().read_file("answer.txt")
        return Score(value=CORRECT if answer == target.text else INCORRECT, answer=answer)

    return score


@task
def shouting() -> Task:
    return Task(dataset=SAMPLES, solver=shout(), scorer=in_sandbox(), sandbox="createos")


@task
def streaming() -> Task:
    return Task(dataset=SAMPLES, solver=stream(), scorer=in_sandbox(), sandbox="createos")


@task
def hanging() -> Task:
    return Task(dataset=SAMPLES, solver=hang(), scorer=in_sandbox(), sandbox="createos")
