"""Inspect AI on CreateOS: every sample of a task runs in a sandbox of its own.

    pip install 'createos-sync[inspect]'
    inspect eval examples/inspect_task.py --model openai/gpt-4o-mini    # with CREATEOS_API_KEY
    python examples/inspect_task.py    # model mockllm/model, on CreateOS or the local emulator

``sandbox="createos"`` is all a task needs (the package registers it with
Inspect); ``sandbox=("createos", "createos.yaml")`` reads a config (shape,
rootfs or template, a Dockerfile built once, egress, env, setup, ttl, user).
Each sample's sandbox is destroyed when the sample ends, cancelled or not;
``inspect sandbox cleanup createos`` destroys what a killed eval left.
"""

from __future__ import annotations

import os

from inspect_ai import Task, eval, task
from inspect_ai.dataset import Sample
from inspect_ai.scorer import match
from inspect_ai.solver import Generate, Solver, TaskState, solver
from inspect_ai.util import sandbox

PROGRAMS = [
    Sample(input="print(6 * 7)", target="42"),
    Sample(input="print(len('sandbox'))", target="7"),
    Sample(input="import sys; print(sys.version_info.major)", target="3"),
]


@solver
def run_program() -> Solver:
    """Runs the sample's Python program in its sandbox; its output is the answer."""

    async def solve(state: TaskState, generate: Generate) -> TaskState:
        await sandbox().write_file("program.py", state.input_text)
        result = await sandbox().exec(["python3", "program.py"], timeout=60)
        state.output.completion = result.stdout.strip() if result.success else result.stderr
        return state

    return solve


@task
def python_in_sandboxes() -> Task:
    return Task(dataset=PROGRAMS, solver=run_program(), scorer=match(), sandbox="createos")


def main() -> None:
    [log] = eval(python_in_sandboxes(), model="mockllm/model", display="none")
    assert log.samples is not None
    correct = sum(s.scores is not None and s.scores["match"].value == "C" for s in log.samples)
    print(f"{log.status}: {correct} of {len(log.samples)} samples correct")


if __name__ == "__main__":
    if os.environ.get("CREATEOS_API_KEY"):
        main()
    else:
        from createos_sync.emulator import Emulator

        with Emulator() as emulator:
            print("(no CREATEOS_API_KEY: local emulator)")
            os.environ.update(CREATEOS_API_URL=emulator.url, CREATEOS_API_KEY=emulator.api_key)
            main()
