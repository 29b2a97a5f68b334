"""_op_args.py - the attention options (Options of _plan.py) as the plain arguments of dilattn's
torch custom operators (_torch_ops.py), and back.

A torch.library operator takes tensors, ints, floats, bools, strings and lists of those, never
a Python object: torch.compile records its arguments in the graph, and a fake (meta) run must
know the outputs' shapes and dtypes from them alone. So every option the plan is made from is
an argument of its own, in the order of OP_ARGS, whose schema types the operators' schemas
are written from. A block-sparse mask travels as its BSR arrays (dilattn_mask.h's layout,
Mask.to_bsr) and is built again, validated, from them (mask.from_bsr). A pool and dropout are
not operator arguments: dilattn.torch takes no dropout, and a call with a pool keeps to the
torch.autograd.Function, whose plan lives in the autograd graph.

This module needs no torch, so its round trip is tested wherever numpy is
(tests/packages/python/test_op_args.py)."""
import collections

from ._plan import Options

# (name, schema type) of every option argument, in the operators' order.
OP_ARGS = (
    ("segments", "int[]?"),
    ("dilations", "int[]?"),
    ("heads_mode", "str"),
    ("causal", "bool"),
    ("scale", "float?"),
    ("backend", "str"),
    ("window_size", "int[]?"),       # [left, right]
    ("softcap", "float"),            # 0 turns it off
    ("alibi_slopes", "float[]?"),
    ("mask_sizes", "int[]?"),        # [seqlen_q, seqlen_k, block_q, block_k]
    ("mask_row_ptr", "int[]?"),
    ("mask_col_idx", "int[]?"),
    ("mask_head_ptr", "int[]?"),     # None: one mask for all heads
)

OpArgs = collections.namedtuple("OpArgs", [name for name, _ in OP_ARGS])


def schema_arguments():
    """The option arguments as they follow the tensors in an operator schema."""
    return ", ".join(f"{kind} {name}" for name, kind in OP_ARGS)


def _ints(values):
    return None if values is None else [int(x) for x in values]


def op_args(options):
    """The OpArgs of validated options (an Options without a pool or dropout)."""
    if options.pool is not None or options.dropout_p != 0.0:
        raise ValueError("a pool or dropout is no custom operator argument: that call takes "
                         "the torch.autograd.Function")
    mask_sizes = mask_row_ptr = mask_col_idx = mask_head_ptr = None
    if options.mask is not None:
        m = options.mask
        row_ptr, col_idx, head_ptr = m.to_bsr()
        mask_sizes = [int(m.seqlen_q), int(m.seqlen_k), int(m.block_q), int(m.block_k)]
        mask_row_ptr, mask_col_idx, mask_head_ptr = (_ints(row_ptr), _ints(col_idx),
                                                     _ints(head_ptr))
    return OpArgs(
        segments=_ints(options.segments), dilations=_ints(options.dilations),
        heads_mode=options.heads_mode, causal=options.causal, scale=options.scale,
        backend=options.backend, window_size=_ints(options.window_size),
        softcap=options.softcap,
        alibi_slopes=None if options.alibi_slopes is None else list(options.alibi_slopes),
        mask_sizes=mask_sizes, mask_row_ptr=mask_row_ptr, mask_col_idx=mask_col_idx,
        mask_head_ptr=mask_head_ptr)


def options_from_op_args(args):
    """The Options that args (an OpArgs or its tuple) describe, validated again; the mask
    is built anew from its BSR arrays."""
    args = OpArgs(*args)
    mask = None
    if args.mask_sizes is not None:
        from . import mask as _mask
        seqlen_q, seqlen_k, block_q, block_k = args.mask_sizes
        mask = _mask.from_bsr(args.mask_row_ptr, args.mask_col_idx, seqlen_q, block_q,
                              head_ptr=args.mask_head_ptr, seqlen_k=seqlen_k, block_k=block_k)
    return Options(args.segments, args.dilations, args.heads_mode, args.causal, args.scale,
                   mask, args.backend, window_size=args.window_size, softcap=args.softcap,
                   alibi_slopes=args.alibi_slopes)


def cache_key(args):
    """args as a hashable tuple (lists become tuples), for a cache of plans."""
    return tuple(tuple(a) if isinstance(a, list) else a for a in OpArgs(*args))


def lse_dtype_name(args, dtype):
    """The dtype of the LSE an operator returns for inputs of dtype (a dilattn dtype name),
    from its arguments alone (a fake run has nothing else), as Plan.lse_dtype says: "f64" for
    f64 inputs (computed in f64, SPEC 12) and where the plan is the reference's, "f32"
    elsewhere. The reference is the plan of backend "ref" (the SPEC 10 variants run on "cpu"
    too, so "auto" keeps them there). Where "auto" turns to "ref" (D > 256, say) with inputs
    narrower than f64, the LSE is f32, which every backend takes (SPEC 1)."""
    args = OpArgs(*args)
    return "f64" if dtype == "f64" or args.backend == "ref" else "f32"


def check_schema_types(args):
    """Raises TypeError naming the first argument whose value the schema type of OP_ARGS
    does not take (a bool is no int here, an int no float: torch's schema parser refuses
    them)."""
    def scalar_ok(kind, x):
        if kind == "int":
            return isinstance(x, int) and not isinstance(x, bool)
        if kind == "float":
            return isinstance(x, float)
        if kind == "bool":
            return isinstance(x, bool)
        return isinstance(x, str)

    for (name, kind), value in zip(OP_ARGS, OpArgs(*args)):
        optional = kind.endswith("?")
        base = kind.rstrip("?")
        if value is None and optional:
            continue
        if base.endswith("[]"):
            ok = isinstance(value, list) and all(scalar_ok(base[:-2], x) for x in value)
        else:
            ok = scalar_ok(base, value)
        if not ok:
            raise TypeError(f"{name}={value!r} does not match its schema type {kind}")
