"""conftest.py - the package tests run against the installed dilattn (pip install .); say
which one was imported, so a test run against a stray copy is visible."""
import dilattn


def pytest_report_header(config):
    return f"dilattn {dilattn.__version__} from {dilattn.__file__}, library {dilattn.library_path()}"
