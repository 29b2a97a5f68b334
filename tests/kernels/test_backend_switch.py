"""The kernel tests' backend switch (tests/common/test_backend.h) never reads a run that checked
nothing as a pass.

Usage: test_backend_switch.py FORWARD_TEST DEVICE_ARCH_TEST EMU_ONLY_TEST

- DILATTN_TEST_BACKEND=cuda: on a machine with a usable GPU the binary runs its cases and passes;
  anywhere else it exits 1 saying the cuda backend cannot run, having checked nothing. It never
  exits 0 or 77 (skip) without a GPU.
- An unknown backend name exits 1 naming the value.
- An emu-only test asked for cuda says EMU-ONLY and exits 77 (meson: skipped, not passed).
"""
import os
import subprocess
import sys


def run(argv, backend):
    env = dict(os.environ, DILATTN_TEST_BACKEND=backend)
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def main():
    forward, device_arch, emu_only = sys.argv[1:4]
    failures = []

    code, out = run([device_arch], "cuda")
    has_gpu = code == 0 and "GPU present: yes (sm_" in out
    if not has_gpu:
        if code != 1 or "FAILED: DILATTN_TEST_BACKEND = cuda" not in out:
            failures.append(f"device arch on cuda without a GPU: exit {code}, output:\n{out}")
        if "passed" in out:
            failures.append(f"device arch on cuda without a GPU printed a pass count:\n{out}")
    print(f"GPU usable here: {has_gpu}")

    code, out = run([forward, "simt"], "cuda")
    want = 0 if has_gpu else 1
    if code != want:
        failures.append(f"forward simt on cuda: exit {code}, want {want}; output:\n{out[-2000:]}")
    if not has_gpu and "cannot run here, so no case ran" not in out:
        failures.append(f"forward simt on cuda without a GPU does not say why:\n{out}")

    code, out = run([forward, "simt"], "gpu")
    if code != 1 or "DILATTN_TEST_BACKEND = 'gpu'" not in out:
        failures.append(f"unknown backend 'gpu': exit {code}, output:\n{out}")

    code, out = run([emu_only], "cuda")
    if code != 77 or "EMU-ONLY" not in out:
        failures.append(f"emu-only test on cuda: exit {code} (want 77), output:\n{out}")

    for f in failures:
        print("FAILED:", f)
    print(f"backend switch: {len(failures)} failure(s) in 4 checks")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
