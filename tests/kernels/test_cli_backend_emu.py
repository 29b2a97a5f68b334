#!/usr/bin/env python3
"""test_cli_backend_emu.py - `dilattn forward` and `dilattn backward` with `--backend emu` agree
with `--backend ref` (SPEC 8).

The command line replays a case through the CUDA backend's kernels in the SIMT emulator; this
runs dense causal, dilated (mod, three branches, partial segments) and block-sparse (pattern)
cases in f32 and f16 and checks O and LSE, then dQ, dK, dV (SPEC 6; each backend recomputes its
own O and LSE first), with `dilattn compare` at SPEC 8 tolerances (f16: 2e-3/2e-3; LSE:
absolute 1e-4). Usage: test_cli_backend_emu.py PATH_TO_DILATTN
"""
import os
import subprocess
import sys
import tempfile

import numpy as np

CASES = [
    ("dense_causal", ["--causal"]),
    ("dilated_mod", ["--segments", "16,32,64", "--dilations", "1,2,4"]),
    ("sparse_pattern", ["--pattern", "local:1+sink:1", "--block-size", "32"]),
]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout.strip()


def backward_case(cli, tmp, paths, case, flags, dtype, atol):
    """dQ, dK, dV of `dilattn backward` on emu against ref; returns the number of failures."""
    grads = {}
    for backend in ("emu", "ref"):
        grads[backend] = [os.path.join(tmp, f"{g}_{case}_{dtype}_{backend}.npy")
                          for g in ("dq", "dk", "dv")]
        code, text = run([cli, "backward", "--q", paths["q"], "--k", paths["k"], "--v", paths["v"],
                          "--do", paths["do"], "--dq", grads[backend][0], "--dk", grads[backend][1],
                          "--dv", grads[backend][2], "--backend", backend] + flags)
        if code != 0:
            print(f"{case} {dtype} backward {backend}: exit {code}: {text}")
            return 1
    failures = 0
    rtol = atol if dtype == "f2" else 1e-4
    for what, a, b in zip(("dq", "dk", "dv"), grads["emu"], grads["ref"]):
        code, text = run([cli, "compare", a, b, "--atol", str(atol), "--rtol", str(rtol)])
        print(f"{case} {dtype} {what}: {'ok' if code == 0 else 'FAILED'}: {text}")
        failures += code != 0
    return failures


def main():
    cli = sys.argv[1]
    failures = 0
    rng = np.random.default_rng(5)
    with tempfile.TemporaryDirectory() as tmp:
        for dtype, atol in (("f4", 1e-5), ("f2", 2e-3)):
            paths = {}
            for name, shape in (("q", (2, 70, 4, 40)), ("k", (2, 70, 2, 40)), ("v", (2, 70, 2, 40)),
                                ("do", (2, 70, 4, 40))):
                paths[name] = os.path.join(tmp, f"{name}_{dtype}.npy")
                np.save(paths[name], rng.standard_normal(shape).astype("<" + dtype))
            for case, flags in CASES:
                out = {}
                for backend in ("emu", "ref"):
                    o = os.path.join(tmp, f"o_{case}_{dtype}_{backend}.npy")
                    lse = os.path.join(tmp, f"lse_{case}_{dtype}_{backend}.npy")
                    code, text = run([cli, "forward", "--q", paths["q"], "--k", paths["k"],
                                      "--v", paths["v"], "--out", o, "--lse", lse,
                                      "--backend", backend] + flags)
                    if code != 0:
                        print(f"{case} {dtype} {backend}: exit {code}: {text}")
                        failures += 1
                    out[backend] = (o, lse)
                if "emu" not in out or not os.path.exists(out["emu"][0]):
                    continue
                for what, a, b, tol in (("o", out["emu"][0], out["ref"][0], ["--atol", str(atol), "--rtol", str(atol if dtype == "f2" else 1e-4)]),
                                        ("lse", out["emu"][1], out["ref"][1], ["--atol", "1e-4", "--rtol", "0"])):
                    code, text = run([cli, "compare", a, b] + tol)
                    print(f"{case} {dtype} {what}: {'ok' if code == 0 else 'FAILED'}: {text}")
                    failures += code != 0
                failures += backward_case(cli, tmp, paths, case, flags, dtype, atol)
    print(f"{failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
