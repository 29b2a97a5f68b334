"""test_dtypes.py - f16 and bf16 inputs (SPEC 8): inputs are rounded to the dtype, the numpy
oracle runs in f64 on the rounded values, and O (stored in the input dtype) must be within
f16 atol = rtol = 2e-3, bf16 atol = rtol = 1.6e-2. LSE is f32: absolute 1e-4."""
import numpy as np
import pytest

import dilattn_ctypes as dilattn
import spec_numpy
from conftest import random_config, random_inputs

TOL = {"f16": 2e-3, "bf16": 1.6e-2}


def rounded(x, dtype):
    """The array handed to dilattn (f16 values or bf16 bits) and its exact f64 value."""
    if dtype == "f16":
        h = x.astype(np.float16)
        return h, h.astype(np.float64)
    bits = dilattn.to_bf16(x)
    return bits, dilattn.from_bf16(bits).astype(np.float64)


def as_f64(o, dtype):
    return o.astype(np.float64) if dtype == "f16" else dilattn.from_bf16(o).astype(np.float64)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("dilated", [False, True], ids=["dense", "dilated"])
def test_low_precision_forward(seed, dtype, dilated, backend):
    case = random_config(9000 + 1000 * dilated + seed, dilated)
    q, k, v = random_inputs(case, seed)
    (qx, q64), (kx, k64), (vx, v64) = (rounded(x, dtype) for x in (q, k, v))
    o, lse = dilattn.forward(qx, kx, vx, dtype=dtype, lse_dtype=np.float32, backend=backend,
                             **case["config"])
    o_ref, lse_ref = spec_numpy.forward(q64, k64, v64, **case["config"])
    got = as_f64(o, dtype)
    tol = TOL[dtype]
    assert spec_numpy.within(got, o_ref, tol, tol), f"max diff {np.max(np.abs(got - o_ref))}"
    assert spec_numpy.within(lse, lse_ref, 1e-4, 0)


def test_bf16_helpers_round_to_nearest_even():
    # 1 + 2^-8 is halfway between bf16 1 and 1 + 2^-7: ties to even -> 1.0;
    # 1 + 3 * 2^-8 is halfway between 1 + 2^-7 and 1 + 2^-6: ties to even -> 1 + 2^-6.
    x = np.array([1 + 2**-8, 1 + 3 * 2**-8, -2.5], dtype=np.float32)
    assert list(dilattn.from_bf16(dilattn.to_bf16(x))) == [1.0, 1 + 2**-6, -2.5]
