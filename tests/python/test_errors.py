"""test_errors.py - the binding raises DilattnError with the status name and the library's
message naming the argument (SPEC 7), and leaves outputs untouched."""
import numpy as np
import pytest

import dilattn_ctypes as dilattn


def test_bad_dilation_raises_with_message():
    q = np.zeros((1, 4, 1, 2))
    with pytest.raises(dilattn.DilattnError) as e:
        dilattn.forward(q, q, q, segments=[2], dilations=[3])
    assert e.value.name == "DILATTN_ERROR_BAD_DILATION"
    assert "dilations[0] = 3" in e.value.message


def test_shape_mismatch_leaves_output_untouched():
    plan = dilattn.Plan(1, 4, 4, 2, 1, 3, dtype="f64")
    q = np.zeros((1, 4, 2, 3))
    kv = np.zeros((1, 5, 1, 3))            # Nk = 5, the plan has 4
    o = np.full((1, 4, 2, 3), 7.0)
    with pytest.raises(dilattn.DilattnError) as e:
        plan.forward(q, kv, kv, o)
    assert e.value.name == "DILATTN_ERROR_SHAPE_MISMATCH" and "'k'" in e.value.message
    assert np.all(o == 7.0)
