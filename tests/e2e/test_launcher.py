"""The `emem` command set-up installs: a launcher that runs one checkout's venv, on a stock PATH,
that another clone's set-up does not take over and that says what to do when its checkout is gone."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STOCK_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def install_launcher(launcher: Path, checkout: Path) -> str:
    done = subprocess.run(
        ["bash", str(ROOT / "scripts/install_launcher.sh"), str(launcher), str(checkout)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def run(launcher: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The command as a new shell on a stock PATH runs it: by name, from the launcher's folder."""
    environment = {"HOME": os.environ.get("HOME", "/root"), "PATH": f"{launcher.parent}:{STOCK_PATH}"}
    return subprocess.run(["emem", *args], capture_output=True, text=True, timeout=120, env=environment)


def clone(tmp_path: Path, name: str) -> Path:
    """Another checkout with a working venv (its `emem` is this checkout's)."""
    checkout = tmp_path / name
    (checkout / ".venv/bin").mkdir(parents=True)
    (checkout / ".venv/bin/emem").symlink_to(ROOT / ".venv/bin/emem")
    return checkout


@pytest.fixture
def launcher(tmp_path: Path) -> Path:
    if not (ROOT / ".venv/bin/emem").exists():
        pytest.skip("this checkout has no .venv/bin/emem: run bash scripts/setup.sh")
    return tmp_path / "bin" / "emem"


def test_the_launcher_runs_its_checkouts_emem(launcher: Path) -> None:
    assert install_launcher(launcher, ROOT) == f"{launcher} runs the emem of {ROOT.resolve()}\n"
    version = run(launcher, "--dsn", "host=127.0.0.1 port=9 connect_timeout=1", "--version")
    assert version.stdout.startswith("emem-client "), version.stderr


def test_another_clones_set_up_keeps_the_command(launcher: Path, tmp_path: Path) -> None:
    install_launcher(launcher, ROOT)
    second = clone(tmp_path, "second")
    assert "(kept" in install_launcher(launcher, second)
    shutil.rmtree(second)  # deleting that clone leaves the command working
    assert run(launcher, "--help").returncode == 0


def test_a_gone_checkout_says_what_to_do_and_the_next_set_up_takes_over(launcher: Path, tmp_path: Path) -> None:
    first = clone(tmp_path, "first")
    install_launcher(launcher, first)
    shutil.rmtree(first)
    gone = run(launcher, "--help")
    assert gone.returncode == 127
    assert gone.stderr == (
        f"emem: the checkout this command runs, {first}, is gone (or has no .venv).\n"
        "Run 'bash scripts/setup.sh' in a clone of emem: it installs this command again, for that clone.\n"
    )
    assert install_launcher(launcher, ROOT) == f"{launcher} runs the emem of {ROOT.resolve()}\n"
    assert run(launcher, "--help").returncode == 0


def test_the_symbolic_link_of_earlier_set_ups_is_replaced(launcher: Path, tmp_path: Path) -> None:
    launcher.parent.mkdir(parents=True)
    launcher.symlink_to(clone(tmp_path, "old") / ".venv/bin/emem")
    install_launcher(launcher, ROOT)
    assert not launcher.is_symlink() and run(launcher, "--help").returncode == 0
