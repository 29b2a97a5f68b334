"""helpers.py - what the package tests share: the installed dilattn, the independent numpy
SPEC implementation (tests/common/spec_numpy.py, imported by path, not copied), the problem
cases (the Rust crate's tests use the same ones), SPEC 8 tolerances, the cpu backend against
ref (cpu_against_ref) and torch loading.

Torch: DILATTN_REQUIRE_TORCH=1 (CI) turns a missing torch into a failure, not a skip.
"""
import importlib.util
import os

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _load_spec_numpy():
    path = os.path.join(REPO, "tests", "common", "spec_numpy.py")
    spec = importlib.util.spec_from_file_location("spec_numpy", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


spec_numpy = _load_spec_numpy()


def import_torch():
    """torch, or a module-level skip; a failure instead when DILATTN_REQUIRE_TORCH=1."""
    try:
        import torch
    except ImportError as e:
        if os.environ.get("DILATTN_REQUIRE_TORCH") == "1":
            raise ImportError(f"DILATTN_REQUIRE_TORCH=1 but torch cannot be imported: {e}") from e
        pytest.skip("torch is not installed", allow_module_level=True)
    return torch


# ---------------------------------------------------------------- cases
# (name, sizes (B, Nq, Nk, H, Hkv, D), options). The same list is in rust/dilattn/tests/common/mod.rs.
CASES = [
    ("dense_gqa", (2, 7, 9, 4, 2, 5), dict()),
    ("dense_causal_bottom_right", (2, 7, 9, 4, 2, 5), dict(causal=True)),
    ("dilated_mod_partial_segment", (1, 13, 13, 3, 1, 4),
     dict(segments=[4, 8], dilations=[1, 2], heads_mode="mod")),
    ("dilated_block_causal", (1, 12, 12, 4, 2, 3),
     dict(segments=[6, 12], dilations=[2, 3], heads_mode="block", causal=True)),
    ("dilated_groups_uneven", (2, 16, 16, 5, 5, 4),
     dict(segments=[4, 8, 16], dilations=[1, 2, 4], heads_mode="groups")),
    ("dilated_repeated_branch_scale", (1, 10, 10, 2, 1, 3),
     dict(segments=[5, 5], dilations=[1, 1], scale=0.3)),
]
DENSE_DILATED_IDS = [c[0] for c in CASES]


def cpu_against_ref(q, k, v, do, lib, dtype, extra_grads=0, backend="cpu"):
    """The cpu backend's (or `backend`'s) forward and backward (from ref's O and LSE) against
    ref's, on the same inputs rounded to dtype: 1e-10 in f64, SPEC 8's f32 bound in f32."""
    import dilattn

    if dtype == "f32":
        q, k, v, do = (x.astype(np.float32) for x in (q, k, v, do))
        tol, lse_atol = (1e-5, 1e-4), 1e-4
    else:
        tol, lse_atol = (1e-10, 1e-10), 1e-10
    o_ref, lse_ref = dilattn.forward(q, k, v, backend="ref", **lib)
    o, lse = dilattn.forward(q, k, v, backend=backend, **lib)
    assert o.dtype == q.dtype
    assert spec_numpy.within(o, o_ref, *tol), np.max(np.abs(o - o_ref))
    assert spec_numpy.within(lse, lse_ref, lse_atol, 0), np.max(np.abs(lse - lse_ref))
    wants = dilattn.backward(q, k, v, o_ref, lse_ref, do, backend="ref", **lib)
    grads = dilattn.backward(q, k, v, o_ref, lse_ref, do, backend=backend, **lib)
    assert len(grads) == len(wants) == 3 + extra_grads
    for name, got, want in zip(("dq", "dk", "dv", "d_sinks"), grads, wants):
        assert spec_numpy.within(np.asarray(got, np.float64), np.asarray(want, np.float64), *tol), \
            f"{name}: max diff {np.max(np.abs(np.asarray(got, np.float64) - want))}"


def inputs_and_rng(sizes, seed):
    """q, k, v, dO in f64, uniform in [-1, 1), and the generator that drew them, for a test that
    draws more (sinks, slopes) after them."""
    B, Nq, Nk, H, Hkv, D = sizes
    rng = np.random.default_rng(seed)
    q = rng.uniform(-1, 1, (B, Nq, H, D))
    k = rng.uniform(-1, 1, (B, Nk, Hkv, D))
    v = rng.uniform(-1, 1, (B, Nk, Hkv, D))
    do = rng.uniform(-1, 1, (B, Nq, H, D))
    return q, k, v, do, rng


def inputs(sizes, seed, dtype=np.float64):
    return tuple(x.astype(dtype) for x in inputs_and_rng(sizes, seed)[:4])


def spec_config(options):
    """The options spec_numpy takes (it has no backend, and takes the scale as its own argument)."""
    return {key: value for key, value in options.items() if key not in ("scale", "backend")}


# SPEC 8: (atol, rtol) per dtype against the f64 reference; LSE absolute 1e-4 in f32.
TOLERANCE = {"f32": (1e-5, 1e-4), "f16": (2e-3, 2e-3), "bf16": (1.6e-2, 1.6e-2)}
within = spec_numpy.within


def dropout_ds_widening(p):
    """SPEC 12: with dropout p, a backward that rounds dS to f16 or bf16 before dS K and dS^T Q
    (the tensor-core kernels) holds dQ and dK to SPEC 8's bound times this."""
    return 1.25 / (1.0 - p)


# ---------------------------------------------------------------- block-sparse oracle
def block_sparse_numpy(q, k, v, blocks, bq, bk, causal=False, scale=None):
    """SPEC 2 with A(i) from SPEC 4, written from the SPEC text: blocks[h or 0][ib, jb] is
    True where key block jb is listed for row block ib. Returns O, LSE in f64."""
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    B, Nq, H, D = q.shape
    Nk, Hkv = k.shape[1], k.shape[2]
    sc = 1.0 / np.sqrt(D) if scale is None else scale
    o = np.zeros((B, Nq, H, D))
    lse = np.full((B, H, Nq), -np.inf)
    for h in range(H):
        g = h // (H // Hkv)
        heads_blocks = blocks[h if len(blocks) > 1 else 0]
        for i in range(Nq):
            keys = [j for j in range(Nk) if heads_blocks[i // bq, j // bk]
                    and (not causal or j <= i + Nk - Nq)]
            if not keys:
                continue
            s = sc * np.einsum("bd,bjd->bj", q[:, i, h], k[:, keys, g])
            m = s.max(axis=1, keepdims=True)
            l = m[:, 0] + np.log(np.exp(s - m).sum(axis=1))
            o[:, i, h] = np.einsum("bj,bjd->bd", np.exp(s - l[:, None]), v[:, keys, g])
            lse[:, h, i] = l
    return o, lse


# ---------------------------------------------------------------- the library boundary
class WatchedLibrary:
    """The loaded library (dilattn._abi.lib()) with the functions in `names` watched: `entered`
    is set when a call of one begins, `returned` once it has returned, and `calls` holds
    (name, arguments) of each. Install it with monkeypatch.setattr(_abi, "_lib", ...)."""

    def __init__(self, library, names):
        import threading
        self._library, self._names = library, set(names)
        self.entered, self.returned = threading.Event(), threading.Event()
        self.calls = []

    def __getattr__(self, attr):
        fn = getattr(self._library, attr)
        if attr not in self._names:
            return fn

        def watched(*args):
            self.calls.append((attr, args))
            self.entered.set()
            try:
                return fn(*args)
            finally:
                self.returned.set()
        return watched


def watch_library(monkeypatch, *names):
    from dilattn import _abi
    watched = WatchedLibrary(_abi.lib(), names)
    monkeypatch.setattr(_abi, "_lib", watched)
    return watched
