"""test_op_args.py - the attention options as the plain arguments of dilattn's torch custom
operators (python/dilattn/_op_args.py) and the cache of plans they share
(python/dilattn/_plan_cache.py). Needs no torch: both run wherever numpy does.

Checks: options -> arguments -> options -> arguments is the identity for dense, dilated,
block-sparse (one mask and a mask per head) and the reference-only variants, every argument
has the type its schema names, and a plan made from the arguments computes bit for bit what
dilattn.forward computes with the options; the LSE dtype the arguments give is the one the
library's plan takes (SPEC 1); the schema types refuse a bool for an int and an int for a
float. The cache makes one plan per key, also under threads, keeps the most recently used,
and keeps nothing when making fails."""
import threading
import time

import numpy as np
import pytest

import dilattn
from dilattn import _op_args, _plan
from dilattn._numpy import view
from dilattn._plan_cache import PlanCache
from helpers import CASES, inputs

SIZES = (1, 12, 12, 2, 1, 3)


def _cases():
    cases = [(name, sizes, options) for name, sizes, options in CASES]
    cases.append(("block_sparse", SIZES,
                  dict(mask=lambda: dilattn.mask.pattern("local:1+sink:1", 12, 4), causal=True)))
    cases.append(("block_sparse_per_head", SIZES,
                  dict(mask=lambda: dilattn.mask.random(12, 4, 0.5, seed=3, num_heads=2))))
    cases.append(("window_softcap_alibi", SIZES,
                  dict(window_size=(3, 1), softcap=0.7, alibi_slopes=[0.25, 0.5], scale=2.0)))
    cases.append(("reference", SIZES, dict(segments=[4], dilations=[2], backend="ref")))
    return cases


CASES_HERE = _cases()
IDS = [c[0] for c in CASES_HERE]


def _options(options):
    options = dict(options)
    if "mask" in options:
        options["mask"] = options["mask"]()
    return options


def _plan_forward(options, q, k, v):
    """o, lse of a plan made from options (as dilattn.forward makes its own)."""
    plan = _plan.Plan(options, (q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2],
                                q.shape[3]), "f64")
    B, Nq, H, _ = q.shape
    o = np.empty(q.shape)
    lse = np.empty((B, H, Nq, 1), dtype=np.float64 if plan.lse_dtype() == "f64" else np.float32)
    plan.forward(view("q", q), view("k", k), view("v", v), view("o", o), view("lse", lse))
    return o, lse[..., 0], plan


@pytest.mark.parametrize("name,sizes,options", CASES_HERE, ids=IDS)
def test_arguments_round_trip_and_compute_what_the_options_compute(name, sizes, options):
    kwargs = _options(options)
    args = _op_args.op_args(_plan.Options(**kwargs))
    _op_args.check_schema_types(args)
    again = _op_args.op_args(_op_args.options_from_op_args(args))
    assert again == args
    assert _op_args.cache_key(again) == _op_args.cache_key(args)
    hash(_op_args.cache_key(args))

    q, k, v, _ = inputs(sizes, seed=81)
    want_o, want_lse = dilattn.forward(q, k, v, **kwargs)
    o, lse, plan = _plan_forward(_op_args.options_from_op_args(args), q, k, v)
    assert np.array_equal(o, want_o) and np.array_equal(lse, want_lse)
    # The LSE dtype the operators give from the arguments and the input dtype alone is the
    # plan's (f64 inputs, D of 3 to 5: "auto" takes the cpu backend, variants included; both
    # it and the reference compute f64 in f64).
    assert _op_args.lse_dtype_name(args, "f64") == plan.lse_dtype(), plan.backend
    # Narrower inputs: f64 from the reference alone.
    narrow = "f64" if plan.backend == "ref" else "f32"
    assert _op_args.lse_dtype_name(args, "f32") == narrow, plan.backend


def test_mask_travels_as_its_bsr_arrays():
    m = dilattn.mask.random(12, 4, 0.5, seed=3, num_heads=2)
    args = _op_args.op_args(_plan.Options(mask=m))
    row_ptr, col_idx, head_ptr = m.to_bsr()
    assert args.mask_sizes == [12, 12, 4, 4]
    assert (args.mask_row_ptr, args.mask_col_idx, args.mask_head_ptr) == (
        row_ptr.tolist(), col_idx.tolist(), head_ptr.tolist())
    rebuilt = _op_args.options_from_op_args(args).mask
    assert np.array_equal(rebuilt.to_dense(), m.to_dense())


def test_schema_names_every_argument_in_order():
    assert _op_args.schema_arguments() == (
        "int[]? segments, int[]? dilations, str heads_mode, bool causal, float? scale, "
        "str backend, int[]? window_size, float softcap, float[]? alibi_slopes, "
        "int[]? mask_sizes, int[]? mask_row_ptr, int[]? mask_col_idx, int[]? mask_head_ptr")
    assert _op_args.OpArgs._fields == tuple(name for name, _ in _op_args.OP_ARGS)


def test_schema_types_refuse_a_bool_for_an_int_and_an_int_for_a_float():
    args = _op_args.op_args(_plan.Options(segments=[4], dilations=[1], scale=0.5))
    with pytest.raises(TypeError, match=r"segments=\[True\] does not match .* int\[\]\?"):
        _op_args.check_schema_types(args._replace(segments=[True]))
    with pytest.raises(TypeError, match=r"scale=1 does not match .* float\?"):
        _op_args.check_schema_types(args._replace(scale=1))
    with pytest.raises(TypeError, match="causal=1 does not match"):
        _op_args.check_schema_types(args._replace(causal=1))


def test_a_pool_or_dropout_is_no_operator_argument():
    with dilattn.Pool(1 << 16) as pool:
        with pytest.raises(ValueError, match="pool or dropout"):
            _op_args.op_args(_plan.Options(pool=pool))
    with pytest.raises(ValueError, match="pool or dropout"):
        _op_args.op_args(_plan.Options(dropout_p=0.1))


# ---------------------------------------------------------------- the cache
def test_cache_makes_one_plan_per_key_and_keeps_the_most_recent():
    made = []

    def make(key):
        def build():
            made.append(key)
            return object()
        return build

    cache = PlanCache(capacity=2)
    a = cache.get("a", make("a"))
    assert cache.get("a", make("a")) is a and made == ["a"]
    b = cache.get("b", make("b"))
    cache.get("a", make("a"))          # "a" is now the most recent: "b" goes first
    cache.get("c", make("c"))
    assert len(cache) == 2 and made == ["a", "b", "c"]
    assert cache.get("a", make("a")) is a
    assert cache.get("b", make("b")) is not b and made == ["a", "b", "c", "b"]


def test_cache_keeps_nothing_when_making_fails():
    cache = PlanCache()

    def fail():
        raise dilattn.InvalidArgumentError(14, "no")

    with pytest.raises(dilattn.InvalidArgumentError):
        cache.get("k", fail)
    assert len(cache) == 0


def test_cache_makes_one_plan_for_threads_that_ask_at_once():
    cache, made, results = PlanCache(), [], []
    start = threading.Barrier(8)

    def build():
        made.append(1)
        time.sleep(0.05)               # the others ask while this one makes it
        return object()

    def ask():
        start.wait()
        results.append(cache.get("key", build))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(made) == 1 and len(results) == 8 and all(r is results[0] for r in results)
