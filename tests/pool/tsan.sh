#!/bin/sh
# tsan.sh - the ThreadSanitizer build of the pool's 4-thread stress test.
# Configures its own build directory with -Db_sanitize=thread (CUDA, the emulator, MPI and all
# but the baseline of the cpu backend's instruction sets off: the pool is host code and the test
# makes no attention call), builds only the stress test and runs it. Fails on any data race
# report.
# Usage: tests/pool/tsan.sh [build dir=build-pool-tsan]
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-"$root/build-pool-tsan"}
if [ ! -f "$dir/build.ninja" ]; then
  meson setup "$dir" "$root" -Db_sanitize=thread -Dbuildtype=debugoptimized -Dcuda=disabled \
    -Dnccl=disabled -Dmpi=disabled -Demulator=false -Db_lundef=false -Dcpu_isas=baseline
fi
ninja -C "$dir" -j2 tests/pool/pool_threads
# halt_on_error: the first race fails the run (exit 66) instead of a warning in a passing test.
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}" \
  DILATTN_POOL_THREAD_ITERS=${DILATTN_POOL_THREAD_ITERS:-5000} \
  "$dir/tests/pool/pool_threads"
