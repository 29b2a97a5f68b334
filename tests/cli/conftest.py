"""conftest.py - shared setup for the tests of the `dilattn` command line (tests/cli/).

The helper modules (cli_support.py here: running the tool and making inputs;
tests/common/spec_numpy.py: the numpy reference of SPEC 2-4 and 6 every Python test uses) go on
sys.path so they import the same way whichever directory pytest is started from.
"""
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))

from cli_support import make_inputs  # noqa: E402  (after the sys.path line above)


@pytest.fixture
def inputs(tmp_path):
    """Q, K, V, dO of shape [1, 12, 2, 4] <f4 saved in tmp_path: (arrays, paths) by name."""
    return make_inputs(tmp_path)
