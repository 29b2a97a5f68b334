"""dilattn - dense, dilated (LongNet) and block-sparse attention, forward and backward, from
the dilattn C library (docs/spec.md defines what it computes).

numpy:   o, lse = dilattn.forward(q, k, v, segments=[8, 16], dilations=[1, 2])
         dq, dk, dv = dilattn.backward(q, k, v, o, lse, do, segments=[8, 16], dilations=[1, 2])
masks:   dilattn.forward(q, k, v, mask=dilattn.mask.pattern("local:2+sink:1", n, 64))
PyTorch: dilattn.torch.attention(q, k, v, ...), dilattn.torch.DilatedAttention,
         dilattn.torch.MultiheadDilatedAttention (torch is optional: import dilattn.torch);
         the DarcStar package's family: dilattn.torch.create_multihead_dilated_attention("auto",
         ...), ImprovedDilatedAttention, RingDilatedAttention, BlockSparseRingDilatedAttention, ...
numpy vs torch: dilattn.forward/backward take numpy arrays (a torch tensor is a TypeError naming
         dilattn.torch.attention); the package is typed (py.typed)
ring:    dilattn.ring.run_threads(P, lambda comm: dilattn.ring.ring_forward(comm, ...)) (SPEC 5)
pools:   with dilattn.Pool(1 << 20) as pool: dilattn.forward(q, k, v, pool=pool); pool.stats()
errors:  dilattn.Error and its subclasses, with .status, .status_name and .message
progress: dilattn.forward(q, k, v, progress=True) shows a tqdm bar (when tqdm is installed) on
         a long call; progress=callable(done, total) is called instead, and a true return
         stops the call (CancelledError); Ctrl-C stops it too (docs/spec.md section 14.11)
threads: a Pool, a plan and a ring.Comm may be used from several threads; close() waits for
         the calls in flight on other threads, and later calls raise
integers: sizes, counts, seeds and addresses are Python or numpy integers within their C type,
         never wrapped: a value outside it raises IntegerRangeError (an OverflowError); a float,
         a string or a bool (not an integer here) NotAnIntegerError (a TypeError)
build:   python -m dilattn info
"""
from . import mask, ring
from ._abi import library_path
from ._errors import (CancelledError, DeviceError, Error, IntegerRangeError, InternalError,
                      InvalidArgumentError, NotAnIntegerError, OutOfMemoryError, UnsupportedError)
from ._info import __version__, backend_available, build_info, info, library_version
from ._numpy import backward, forward
from .pool import Pool, PoolStats

__all__ = ["forward", "backward", "mask", "ring", "Pool", "PoolStats", "Error", "InvalidArgumentError",
           "IntegerRangeError", "NotAnIntegerError", "UnsupportedError", "DeviceError",
           "OutOfMemoryError", "InternalError", "CancelledError", "backend_available", "build_info", "info",
           "library_path", "library_version", "__version__"]


def __getattr__(name):
    # dilattn.torch without importing torch for numpy-only users.
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'dilattn' has no attribute {name!r}")
