"""test_info.py - python -m dilattn info reports the package, the library it loaded and the
backends; the version agrees with the C library's."""
import subprocess
import sys

import pytest

import dilattn


def test_python_m_dilattn_info():
    run = subprocess.run([sys.executable, "-m", "dilattn", "info"], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert f"dilattn (Python) {dilattn.__version__}" in run.stdout
    assert f"library: {dilattn.library_path()}" in run.stdout
    assert "backend ref: available" in run.stdout
    assert "backends built:" in run.stdout          # the library's own build_info follows


def test_python_m_dilattn_without_command_prints_usage():
    run = subprocess.run([sys.executable, "-m", "dilattn"], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "usage: python -m dilattn COMMAND" in run.stderr


@pytest.mark.parametrize("flag", ["--help", "-h", "help"])
def test_python_m_dilattn_help_lists_every_command(flag):
    from dilattn.__main__ import COMMANDS
    run = subprocess.run([sys.executable, "-m", "dilattn", flag], capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    listed = [line.split()[0] for line in run.stdout.splitlines() if line.startswith("  ")]
    assert listed == ["info", "help"] == list(COMMANDS)
    assert "build/tools/dilattn" in run.stdout


def test_commands_of_the_c_cli_say_where_it_is():
    run = subprocess.run([sys.executable, "-m", "dilattn", "forward", "--q", "q.npy"],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2
    assert "'forward' is a command of the C command line (build/tools/dilattn" in run.stderr


def test_console_script_runs_the_package_commands(capsys):
    from dilattn.__main__ import console
    assert console(["--help"]) == 0
    assert capsys.readouterr().out.startswith("usage: dilattn COMMAND")


def test_package_and_library_versions_agree():
    assert dilattn.__version__ == dilattn.library_version()
