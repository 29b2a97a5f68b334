"""example.py - a dilated (LongNet) forward through the ctypes binding on small shapes, and the
largest difference from the f64 reference backend.

    DILATTN_LIB=build/lib/libdilattn.so python3 examples/python/example.py

Runs on the fast cpu backend when this build has it (else on ref itself, difference 0), with
three branches (w, r) = (8, 1), (16, 2), (32, 4) in mod head mode, causal.
"""
import numpy as np

import dilattn_ctypes as dilattn


def main():
    B, N, H, D = 2, 64, 4, 32
    config = dict(segments=[8, 16, 32], dilations=[1, 2, 4], heads_mode="mod", causal=True)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((B, N, H, D)).astype(np.float32) for _ in range(3))

    backend = "cpu" if dilattn.backend_available("cpu") else "ref"
    o, lse = dilattn.forward(q, k, v, backend=backend, **config)
    o_ref, lse_ref = dilattn.forward(q.astype(np.float64), k.astype(np.float64),
                                     v.astype(np.float64), backend="ref", **config)
    version = dilattn.lib().dilattn_version()  # DILATTN_VERSION: major * 10000 + minor * 100 + patch
    print(f"dilattn {version // 10000}.{version // 100 % 100}.{version % 100}: dilated forward, B={B} N={N} H={H} D={D}, "
          f"branches {list(zip(config['segments'], config['dilations']))}")
    print(f"backend {backend}: max |O - O_ref| = {np.max(np.abs(o - o_ref)):.3e}, "
          f"max |LSE - LSE_ref| = {np.max(np.abs(lse - lse_ref)):.3e}")


if __name__ == "__main__":
    main()
