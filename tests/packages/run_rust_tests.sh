#!/usr/bin/env bash
# run_rust_tests.sh BUILD_DIR - runs `cargo test --offline` of the Rust crates (rust/: dilattn-sys
# and dilattn) against the libdilattn of a meson build directory (BUILD_DIR/lib), and prints
# cargo's test summaries; then `cargo run` of a crate that depends on them
# (tests/packages/rust_dependent) with no library given, which dilattn-sys then builds itself.
# No external crates are used, so nothing is downloaded.
# Without cargo it says so and exits 0: whether that is acceptable is the caller's decision.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:?usage: run_rust_tests.sh MESON_BUILD_DIR}"
if ! command -v cargo >/dev/null 2>&1; then
  echo "run_rust_tests.sh: cargo not found; the Rust crates were NOT tested"
  exit 0
fi
lib_dir="$(cd "$build/lib" && pwd)"
if ! ls "$lib_dir"/libdilattn.so* >/dev/null 2>&1 && ! ls "$lib_dir"/libdilattn*.dylib >/dev/null 2>&1; then
  echo "run_rust_tests.sh: no libdilattn in $lib_dir (build it: meson compile -C $build)" >&2
  exit 1
fi
echo "== cargo test --offline (rust/, libdilattn from $lib_dir)"
# The target directory lives in the build directory, so the source tree stays clean.
export DILATTN_LIB_DIR="$lib_dir"
export CARGO_TARGET_DIR="$(cd "$build" && pwd)/rust-target"
# An ASan-built library needs its runtime in the test processes (cargo's are not instrumented);
# rustdoc does not run under it, so the (compile-only) doctests are left out there.
cargo_args=(test --offline --workspace)
# (nm's output is captured first: with pipefail, grep -q closing the pipe early would fail it)
symbols="$(nm -D "$lib_dir/libdilattn.so" 2>/dev/null || true)"
if [[ "$symbols" == *__asan_init* ]]; then
  # Only the test processes get the runtime, through cargo's runner: cargo and rustc under an
  # LD_PRELOADed libasan crash.
  asan="$(cc -print-file-name=libasan.so)"
  host="$(rustc -vV | sed -n 's/^host: //p' | tr 'a-z-' 'A-Z_')"
  export "CARGO_TARGET_${host}_RUNNER=env LD_PRELOAD=$asan"
  export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=0}"
  cargo_args+=(--lib --tests)
  echo "   (ASan build: test processes run with LD_PRELOAD=$asan, doctests skipped)"
fi
cd "$repo/rust"
log="$CARGO_TARGET_DIR/cargo-test.log"
mkdir -p "$CARGO_TARGET_DIR"
status=0
cargo "${cargo_args[@]}" >"$log" 2>&1 || status=$?
grep -E "^(running|test result)|^warning" "$log" || true
if [[ $status -ne 0 ]]; then
  echo "== cargo test failed (exit $status); the end of its output:" >&2
  tail -n 60 "$log" >&2
  exit $status
fi

# A crate that depends on `dilattn` as a user's crate does, run with no DILATTN_LIB_DIR and no
# pkg-config entry: dilattn-sys must build the library from this repository's sources (its
# `bundled` feature) and link it statically, so the binary needs no libdilattn.so. The bundled
# library is not the sanitized one, so this runs in the plain build only.
if [[ "$symbols" != *__asan_init* ]]; then
  dependent="$repo/tests/packages/rust_dependent"
  dep_target="$CARGO_TARGET_DIR/dependent"
  dep_log="$CARGO_TARGET_DIR/cargo-run-dependent.log"
  echo "== cargo run --offline (tests/packages/rust_dependent: no DILATTN_LIB_DIR, bundled library)"
  (cd "$dependent" && env -u DILATTN_LIB_DIR -u PKG_CONFIG_PATH PKG_CONFIG_LIBDIR=/nonexistent \
     CARGO_TARGET_DIR="$dep_target" cargo run --release --offline) >"$dep_log" 2>&1 || status=$?
  grep -E "^(dilattn |ok$)|bundled" "$dep_log" || true
  if [[ $status -ne 0 ]]; then
    echo "== the dependent crate failed (exit $status); the end of its output:" >&2
    tail -n 60 "$dep_log" >&2
    exit $status
  fi
  if ldd "$dep_target/release/dilattn-dependent" | grep -q libdilattn; then
    echo "FAIL: the dependent crate's binary links a shared libdilattn, not the bundled one" >&2
    exit 1
  fi
fi
exit $status
