#!/usr/bin/env python3
"""check_ptxas_spills.py - fails when ptxas reports local-memory spills in a main kernel.

Reads the reports cuda/meson.build keeps (ptxas_report_<kernel>.txt, nvcc -Xptxas -v for every
arch). For each entry function whose name holds a main kernel (MAIN_KERNELS: the forward SIMT,
MMA, MMA_TF32 and Hopper kernels, the backward SIMT, MMA and MMA_TF32 kernels), "N bytes spill
stores, M bytes spill loads" must be 0 and 0. A report with no main kernel at all fails too (a
check that cannot see its subject must not pass), and so does one missing an arch of --archs
(real code for every SM the build targets); the Hopper kernel's report (HOPPER_KERNELS) holds
sm_90a alone, wanted when --archs lists 90 (cuda/meson.build builds it for nothing else). A
ptxas note that serialises wgmma on a main kernel fails as well: ptxas then waits for every wgmma product at
once ("wgmma.mma_async instructions are serialized"), which undoes the Hopper kernel's
overlap without changing a result, so only this check can see it. C7518 and C7520 are the
notes seen so far (a wait, or a compiler-inserted arrive, in a path ptxas cannot prove
warp-uniform); any "wgmma ... serialized" note counts.
Usage: check_ptxas_spills.py [--archs 80,90] REPORT...
"""
import re
import sys

MAIN_KERNELS = ("forward_simt_kernel", "forward_mma_kernel", "forward_mma_tf32_kernel",
                "backward_dq_simt_kernel",
                "backward_dkdv_simt_kernel", "backward_dq_mma_kernel", "backward_dkdv_mma_kernel",
                "backward_dq_mma_tf32_kernel", "backward_dkdv_mma_tf32_kernel",
                "forward_wgmma_kernel")
HOPPER_KERNELS = ("forward_wgmma_kernel",)
ENTRY = re.compile(r"Compiling entry function '([^']+)' for '([^']+)'")
SPILL = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")
SERIALIZED = re.compile(r"\((C75\d\d)\) Potential Performance Loss: wgmma.*serialized"
                        r".*in the function '([^']+)'")


def check(path):
    """Returns (entries seen, archs seen, list of failures, whether its kernels are Hopper's)
    for one report."""
    entries, archs, failures, hopper = 0, set(), [], False
    function, arch = None, None
    with open(path) as f:
        for line in f:
            m = ENTRY.search(line)
            if m:
                function, arch = m.group(1), m.group(2)
                continue
            m = SERIALIZED.search(line)
            if m and any(k in m.group(2) for k in MAIN_KERNELS):
                failures.append(f"{path}: {m.group(2)}: wgmma products serialized "
                                f"({m.group(1)}): {line.strip()[:160]}")
                continue
            m = SPILL.search(line)
            if m and function and any(k in function for k in MAIN_KERNELS):
                entries += 1
                archs.add(arch)
                hopper = hopper or any(k in function for k in HOPPER_KERNELS)
                stores, loads = int(m.group(1)), int(m.group(2))
                if stores or loads:
                    failures.append(f"{path}: {function} ({arch}): {stores} bytes spill stores, "
                                    f"{loads} bytes spill loads")
                function = None
    return entries, archs, failures, hopper


def main(argv):
    want_archs = set()
    if len(argv) >= 2 and argv[0] == "--archs":
        want_archs = {"sm_" + a.strip() for a in argv[1].split(",") if a.strip()}
        argv = argv[2:]
    paths = argv
    if not paths:
        print("no ptxas report given")
        return 1
    status = 0
    for path in paths:
        entries, archs, failures, hopper = check(path)
        for failure in failures:
            print("FAIL: " + failure)
        wanted = ({"sm_90a"} if "sm_90" in want_archs else set()) if hopper else want_archs
        missing = sorted(wanted - archs)
        if missing:
            print(f"{path}: no main kernel compiled for {', '.join(missing)}")
            status = 1
        if entries == 0:
            print(f"{path}: no main kernel in the report")
            status = 1
        elif failures:
            status = 1
        elif not missing:
            print(f"{path}: {entries} kernel/arch entries ({', '.join(sorted(archs))}), no spills")
    return status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
