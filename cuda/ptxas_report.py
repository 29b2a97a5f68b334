#!/usr/bin/env python3
"""ptxas_report.py - compile one kernel file with nvcc -Xptxas -v and keep ptxas's resource report.

Used by cuda/meson.build: each kernel file is compiled once, for every arch of option sm_archs,
into the object the library links (--object) and the report beside it (--output);
tests/kernels/check_ptxas_spills.py reads the reports and fails on local-memory spills.
A failed compile prints nvcc's messages and fails; the report then holds them too.
Usage: ptxas_report.py --nvcc NVCC [--object OBJECT] --output REPORT -- NVCC_ARGS... KERNEL.cu
"""
import argparse
import os
import subprocess
import sys
import tempfile


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nvcc", required=True)
    parser.add_argument("--object", help="where the object goes (default: a temporary file)")
    parser.add_argument("--output", required=True)
    parser.add_argument("nvcc_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    nvcc_args = [a for a in args.nvcc_args if a != "--"]
    with tempfile.TemporaryDirectory() as tmp:
        obj = args.object or os.path.join(tmp, "kernel.o")
        cmd = [args.nvcc, "-c", "-Xptxas", "-v", "-o", obj] + nvcc_args
        run = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    with open(args.output, "w") as f:
        f.write("# " + " ".join(cmd) + "\n")
        f.write(run.stdout)
    if run.returncode != 0:
        sys.stderr.write(run.stdout)
        return run.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
