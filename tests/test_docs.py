"""The README is a landing page whose set-up blocks stand alone, and CI runs exactly the
README's test command. (The docs site's own checks: test_docs_site.py, test_docs_examples.py,
test_docs_costs.py.)"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    """The one-line shell blocks of the README's "Try it on a fresh machine" section."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Try it on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_each_setup_block_makes_a_virtual_environment_of_its_own() -> None:
    commands = setup_commands()
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    venvs = [re.match(r"python3 -m venv (\S+) && \. \1/bin/activate && ", c) for c in commands]
    assert all(venvs), commands
    assert len({m.group(1) for m in venvs if m}) == 2  # running both never reuses the first


def test_ci_runs_exactly_the_readme_test_command() -> None:
    test_command = setup_commands()[1]
    assert test_command.endswith("python -m pytest -q -n 2")
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert test_command in ci  # the same line, verbatim
    # then, once the suite passed, the integrations tier and the built wheel's checks
    steps = [line for line in ci if line and not line.startswith("#")]
    after = steps[steps.index(test_command) :]
    assert after.index('((status == 0)) || exit "$status"') < after.index("bash .ci/consumer.sh")
    assert any(line.startswith("bash .ci/integrations.sh") for line in after)
    assert steps[-1] == "((consumer == 0 && integrations == 0))"
    assert "apt-get install" in "\n".join(ci) and "bubblewrap" in "\n".join(ci)


def test_the_readme_is_a_landing_page_that_links_into_the_docs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    links = re.findall(r"\]\(((?:docs|examples)/[^)#]*)(?:#[^)]*)?\)", readme)
    assert len([link for link in links if link.startswith("docs/")]) >= 20  # every section
    missing = [link for link in links if not (ROOT / link).exists()]
    assert missing == []
    for section in ("tutorial.md", "how-to/", "reference/", "explanation/"):
        assert f"docs/{section}" in readme, section
    assert "<!--" not in readme  # no leftover comments
