#!/bin/sh
# run_fuzz.sh - build the pool's libFuzzer harness (tests/pool/fuzz_pool.cpp) with clang and run
# it for a bounded time. No meson needed: it compiles the pool sources directly, with
# a config header saying "no CUDA" (the harness drives host pools).
# Needs clang++ and libFuzzer's runtime: Debian/Ubuntu `apt-get install -y clang-14 libclang-rt-14-dev`.
# Usage: tests/pool/run_fuzz.sh [seconds=60] [work dir=build-pool-fuzz]
# Exit status: 0 when the time ran out with no failure; libFuzzer's non-zero status (and a
# crash-* reproducer in the work dir) otherwise.
set -eu
seconds=${1:-60}
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${2:-"$root/build-pool-fuzz"}
cxx=${CXX_FUZZ:-clang++}
mkdir -p "$work/corpus"
cat > "$work/dilattn_config.h" <<'CONFIG'
/* written by tests/pool/run_fuzz.sh: a host-only build of the pool */
#define DILATTN_HAVE_CUDA 0
#define DILATTN_HAVE_NCCL 0
#define DILATTN_BUILD_FLAGS "fuzz"
CONFIG
"$cxx" -std=c++17 -O1 -g -fno-omit-frame-pointer \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -Wall -Wextra -Wpedantic -Werror \
  -I"$work" -I"$root/lib" -I"$root/lib/internal" \
  "$root/tests/pool/fuzz_pool.cpp" "$root/lib/buddy_pool.cpp" "$root/lib/buddy_allocator.cpp" \
  "$root/lib/errors.cpp" -o "$work/fuzz_pool"
cd "$work"
exec ./fuzz_pool -max_total_time="$seconds" -max_len=4096 -rss_limit_mb=2048 \
  -print_final_stats=1 corpus
