#!/bin/sh
# check_no_cuda_symbols.sh NM EXECUTABLE - fails if EXECUTABLE defines a global symbol named like
# a CUDA runtime function (cudaMalloc, cudaMemcpy, ...). The SIMT emulator's shims are inline
# functions in namespace simt (mangled _ZN4simt...), so none may appear; a plain C symbol
# `cudaMalloc` would clash with libcudart in libdilattn. Used by tests/emu/meson.build.
set -eu
nm_tool="$1"
exe="$2"
found=$("$nm_tool" --defined-only "$exe" | awk '$3 ~ /^cuda[A-Z]/ { print $3 }')
if [ -n "$found" ]; then
  echo "defined CUDA runtime symbols: $found"
  exit 1
fi
count=$("$nm_tool" --defined-only "$exe" | grep -c '_ZN4simt' || true)
if [ "$count" -eq 0 ]; then
  # Nothing of the emulator in the binary would mean this check looks at the wrong file.
  echo "no simt:: symbols in $exe"
  exit 1
fi
echo "ok: no cuda* symbols, $count simt:: symbols"
