"""The pytest plugin, run by pytest in a subprocess on small sample projects.

Each sample runs in a directory of its own (no conftest or ini of this
repository applies), with the plugin loaded the way users get it: by the
package's ``pytest11`` entry point.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .helpers import own_emulator

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "test_with_sandboxes.py"
DEADLINE = 120.0


def pytest_run(project: Path, *args: str, **extra_env: str) -> tuple[int, str]:
    """``python -m pytest`` in ``project``; its exit status and output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CREATEOS_", "PYTEST_"))}
    env["CREATEOS_SYNC_STATE_DIR"] = os.environ["CREATEOS_SYNC_STATE_DIR"]
    env.update(extra_env)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    return done.returncode, done.stdout + done.stderr


def leak_report(out: str) -> str:
    """The "createos leak check" section of a pytest run's output."""
    section = out.split("= createos leak check =", 1)[1].split("\n", 1)[1]
    return section.split("\n=", 1)[0]


def sample(tmp_path: Path, source: str, name: str = "test_sample.py") -> Path:
    (tmp_path / name).write_text(textwrap.dedent(source))
    return tmp_path


def test_the_example_passes(tmp_path: Path) -> None:
    shutil.copy(EXAMPLE, tmp_path)
    status, out = pytest_run(tmp_path)
    assert status == 0, out
    assert "4 passed" in out


def test_live_uses_the_service_of_the_environment_and_checks_its_leaks(tmp_path: Path) -> None:
    sample(tmp_path, LEAKS)
    with own_emulator() as service:  # stands in for CreateOS: reached only through the env
        status, out = pytest_run(
            tmp_path,
            "--createos=live",
            CREATEOS_API_URL=service.url,
            CREATEOS_API_KEY=service.api_key,
        )
        assert status == 1, out
        assert re.search(r"\b3 passed in ", out)
        assert len(leak_report(out).strip().splitlines()) == 3
        created = [r for r in service.request_log if r.operation == "sandbox.create"]
        assert len(created) == 3  # every test's sandbox was made there
        assert service.live_sandboxes() == []  # the leak check destroyed what leaked
    status, out = pytest_run(tmp_path, "--createos=live")
    assert status == 1 and "--createos=live: no API key" in out, out


LEAKS = """
    import createos_sync as cs

    def test_forgets_to_close(createos_client):
        createos_client.lease().open()

    def test_keeps_its_sandbox(createos_client):
        with createos_client.lease(on_exit="keep") as box:
            print("kept", box.id)

    def test_is_tidy(createos_lease):
        assert createos_lease.run("true").ok
"""


def test_a_leaking_test_is_reported_by_name(tmp_path: Path) -> None:
    status, out = pytest_run(sample(tmp_path, LEAKS), "-s")
    assert status == 1, out
    assert re.search(r"\b3 passed in ", out)  # no test is blamed for another's leak
    report = leak_report(out)
    assert "leases or sandboxes outlived the session" in report
    assert re.search(r"lease on sandbox sb-\S+ still open \(test_sample.py::test_forgets", report)
    (kept,) = re.findall(r"kept (sb-\S+)", out)
    assert f"sandbox {kept} still running after its lease closed (test_sample.py::test_k" in report
    assert "test_is_tidy" not in report
    assert len(report.strip().splitlines()) == 3


def test_the_leak_check_can_be_turned_off(tmp_path: Path) -> None:
    status, out = pytest_run(sample(tmp_path, LEAKS), "--createos-leak-check=off")
    assert status == 0, out
    assert "leak check" not in out


def test_a_cleanup_error_at_teardown_fails_the_test_with_its_message(tmp_path: Path) -> None:
    source = """
        from createos_sync.emulator import Fault

        def test_leaves_an_unkillable_process(createos_emulator, createos_lease):
            createos_lease.start("sleep 1000")
            # every termination answers "still running", and leaves it running
            createos_emulator.faults.add(
                Fault("process.delete", times=5, tree_exited_false=True, kill=False)
            )
    """
    status, out = pytest_run(sample(tmp_path, source))
    assert status == 1, out
    assert "1 passed, 1 error" in out
    # the class named, as pytest names an exception: it is what users search for (issue 35)
    pattern = (
        r"createos_lease: CreateosCleanupError: containment unconfirmed: .*sb-\S+ was destroyed"
    )
    assert re.search(pattern, out), out
    assert "Traceback" not in out  # the message, not a wall of frames


def test_the_plugin_is_inert_unless_a_fixture_is_used(tmp_path: Path) -> None:
    source = """
        import sys
        import createos_sync as cs
        from createos_sync.lease import _registry

        def test_plain():
            assert _registry._watchers == []
            assert "createos_sync.emulator" not in sys.modules

        def test_a_lease_of_its_own_is_not_watched():
            from createos_sync.emulator import Emulator
            with Emulator() as emu, emu.client() as client:
                client.lease(on_exit="keep").open().close()  # kept: no fixture, no check
                assert _registry._watchers == []
    """
    status, out = pytest_run(sample(tmp_path, source))
    assert status == 0, out
    assert "2 passed" in out and "leak check" not in out
    assert "createos" in pytest_run(tmp_path, "--help")[1]  # loaded all the same


def test_each_xdist_worker_has_an_emulator_and_a_leak_check_of_its_own(tmp_path: Path) -> None:
    pytest.importorskip("xdist")
    source = """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        def test_uses_a_sandbox(createos_emulator, createos_lease, n):
            print("emulator", createos_emulator.url)
            assert createos_lease.run(f"echo {n}").stdout == f"{n}\\n"

        def test_leaks(createos_client):
            createos_client.lease().open()
    """
    status, out = pytest_run(sample(tmp_path, source), "-n", "2")
    assert status == 1, out
    assert re.search(r"\b5 passed in ", out)
    assert "(test_sample.py::test_leaks)" in leak_report(out)
    urls = set(re.findall(r"emulator (http://\S+)", out))
    assert len(urls) == 2  # one emulator per worker


@pytest.mark.parametrize("plugins", [("-p", "no:xdist"), ()], ids=["without-xdist", "as-installed"])
def test_an_unrelated_suite_passes_and_the_fixtures_work_without_xdist(
    tmp_path: Path, plugins: tuple[str, ...]
) -> None:
    """The plugin loads into every run of every environment with the package (issue 20)."""
    sample(tmp_path, "def test_unrelated():\n    assert 1\n", "test_unrelated.py")
    status, out = pytest_run(tmp_path, *plugins, "test_unrelated.py")
    assert status == 0 and "1 passed" in out, out
    shutil.copy(EXAMPLE, tmp_path)
    status, out = pytest_run(tmp_path, *plugins, EXAMPLE.name)
    assert status == 0 and "4 passed" in out, out


def test_an_unrelated_run_loads_nothing_of_the_sdk(tmp_path: Path) -> None:
    # The plugin is loaded (its options are there) and imports no part of the SDK.
    project = sample(
        tmp_path,
        """
        import sys

        def test_unrelated(pytestconfig):
            assert pytestconfig.getoption("createos") == "local"
            assert [m for m in sys.modules if m.startswith("createos_sync.")] == []
            assert "createos_sync" not in sys.modules and "requests" not in sys.modules
        """,
    )
    status, out = pytest_run(project)
    assert status == 0 and "1 passed" in out, out


def test_a_fixture_used_loads_the_sdk_then(tmp_path: Path) -> None:
    project = sample(
        tmp_path,
        """
        import sys

        def test_first():
            # Collection saw a test using a fixture: the leak watch started with it.
            assert "createos_sync.pytest_plugin" in sys.modules

        def test_uses(createos_client):
            assert createos_client.shapes()
        """,
    )
    status, out = pytest_run(project)
    assert status == 0 and "2 passed" in out, out


def test_local_points_both_families_of_names_at_the_emulator(tmp_path: Path) -> None:
    project = sample(
        tmp_path,
        """
        import os

        def test_names(createos_client):
            url, key = createos_client.config.base_url, createos_client.config.api_key
            assert os.environ["CREATEOS_SANDBOX_BASE_URL"] == os.environ["CREATEOS_API_URL"]
            assert os.environ["CREATEOS_SANDBOX_BASE_URL"].rstrip("/") == url
            assert os.environ["CREATEOS_SANDBOX_API_KEY"] == os.environ["CREATEOS_API_KEY"] == key
        """,
    )
    # An official client's production settings must not survive into the session.
    status, out = pytest_run(
        project,
        CREATEOS_SANDBOX_BASE_URL="https://api.sb.createos.sh",
        CREATEOS_SANDBOX_API_KEY="k-production-0123456789",
    )
    assert status == 0 and "1 passed" in out, out
