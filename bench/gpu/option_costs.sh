#!/usr/bin/env bash
# option_costs.sh - what each option of SPEC 10 and 11 costs on a GPU: bench_gpu
# (bench/gpu/gpu_bench.cpp) once per --options value (plain, dropout, window, softcap, alibi,
# sinks), one after the other on the same build and GPU, and a table of every row's forward and
# backward time over the plain run's (docs/performance.md quotes it). The window keeps fewer
# pairs, so its ratio is of time, not of work; its TFLOP/s in the JSON count the kept pairs.
#
#   bench/gpu/option_costs.sh OUT_DIR [bench_gpu arguments, e.g. --iters 5 --quick]
#
# OUT_DIR gets options_<name>.json for each option and option_costs.txt: 7 files. bench_gpu is
# built for this GPU's arch in build-first-light (bench/gpu/first_light.sh's build, reused when
# present), or DILATTN_BENCH_GPU names one. Without a GPU it prints "no GPU: nothing run" and
# exits 0.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${DILATTN_FIRST_LIGHT_BUILD:-$repo/build-first-light}"
if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUT_DIR [bench_gpu arguments]" >&2
  exit 2
fi
out="$1"
shift
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "no GPU: nothing run"
  exit 0
fi
mkdir -p "$out"
bench="${DILATTN_BENCH_GPU:-$build/bench/gpu/bench_gpu}"
if [[ -z "${DILATTN_BENCH_GPU:-}" ]]; then
  cap="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')"
  { [[ -f "$build/build.ninja" ]] ||
      meson setup "$build" "$repo" -Dbuildtype=release "-Dsm_archs=$cap" -Demulator=false \
        -Dtests=true -Dmpi=disabled -Dcuda=enabled >/dev/null; } &&
    ninja -C "$build" -j "$(nproc)" bench/gpu/bench_gpu lib/libdilattn.so.0.2.0 >/dev/null ||
    { echo "build failed" >&2; exit 1; }
fi

for option in plain dropout window softcap alibi sinks; do
  "$bench" --json "$out/options_$option.json" --options "$option" "$@" >/dev/null ||
    echo "bench_gpu --options $option failed (rc $?)" >&2
done

python3 - "$out" <<'EOF' | tee "$out/option_costs.txt"
import json, os, sys
out = sys.argv[1]
runs = {}
for name in ("plain", "dropout", "window", "softcap", "alibi", "sinks"):
    path = os.path.join(out, f"options_{name}.json")
    if os.path.exists(path):
        runs[name] = json.load(open(path))
plain = runs.get("plain")
if plain is None:
    sys.exit("no plain run: nothing to compare")
dtypes = {0: "f32", 2: "f16", 3: "bf16"}
key = lambda r: (r["kind"], r["dtype"], r["N"], r["D"], r["causal"])
base = {key(r): r for r in plain["results"] if r["status"] == "ok"}
others = [n for n in runs if n != "plain"]
print(f"option cost on {plain['machine']}, commit {plain['commit']}, {plain['date']}: "
      "each row's time with the option over its time without (forward / backward)")
print(f"{'row':34s}" + "".join(f"{n:>16s}" for n in others))
for k, b in base.items():
    label = f"{k[0]}{' causal' if k[4] else ''} {dtypes.get(k[1], k[1])} N={k[2]} D={k[3]}"
    cells = []
    for n in others:
        r = {key(x): x for x in runs[n]["results"]}.get(k)
        if r is None or r["status"] != "ok":
            cells.append(f"{'-':>16s}")
        else:
            cells.append(f"{r['ms'] / b['ms']:7.2f} /{r['backward_ms'] / b['backward_ms']:6.2f}"
                         if b["backward_ms"] else f"{r['ms'] / b['ms']:16.2f}")
    print(f"{label:34s}" + "".join(f"{c:>16s}" for c in cells))
EOF
