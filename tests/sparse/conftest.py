"""conftest.py - with DILATTN_SPARSE_BACKEND=cpu on a build without the cpu backend, end the run
with status 77 before any test runs: meson reports SKIP, never a pass."""
import os

import pytest


def pytest_sessionstart(session):
    from sparse_lib import cpu_available
    if os.environ.get("DILATTN_SPARSE_BACKEND", "ref") == "cpu" and not cpu_available():
        pytest.exit("the cpu backend is not in this build", returncode=77)


def pytest_configure(config):
    config.addinivalue_line("markers", "ref_only: collected only when testing the ref backend")
    config.addinivalue_line("markers", "cpu_only: collected only when testing the cpu backend")


def pytest_collection_modifyitems(config, items):
    # Not collected at all (rather than skipped) in the other mode, so nothing is a silent pass.
    drop = "ref_only" if os.environ.get("DILATTN_SPARSE_BACKEND", "ref") == "cpu" else "cpu_only"
    keep = [it for it in items if it.get_closest_marker(drop) is None]
    if len(keep) != len(items):
        config.hook.pytest_deselected(items=[it for it in items if it not in keep])
        items[:] = keep
