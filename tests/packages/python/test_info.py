"""test_info.py - python -m dilattn info reports the package, the library it loaded and the
backends; the version agrees with the C library's."""
import subprocess
import sys

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
    assert run.returncode == 2 and "usage: python -m dilattn info" in run.stderr


def test_package_and_library_versions_agree():
    assert dilattn.__version__ == dilattn.library_version()
