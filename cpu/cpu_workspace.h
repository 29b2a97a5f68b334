// cpu_workspace.h - each worker's tiles, in the compute type T (float, or double for f64
// inputs), carved from the plan's workspace.
//
// The workspace is workers x values_per_worker(D, T, key_values) values, T = block_rows(p) <=
// 1024: O(threads x tile), never O(N^2) and never O(N x segment), except that the one-pass
// backward (backward_one_pass, cpu_tile_loop.h) adds its dK and dV accumulators of all Nk keys
// (of the longest sequence, in a packed batch run per sequence), 2 x Nk x padded(D) values per
// worker (key_values each), on at most min(threads, one_pass_items) workers: at most the size of
// dK and dV in the compute type, and at most 64 MiB per worker.
// Tiles start on 64-byte boundaries. One layout serves forward and backward (the forward
// leaves some tiles unused). The bf16 pair products (cpu_pair_dot.h) keep their word layouts
// (cpu_pair_tiles.h) in the same tiles, each in at most the tile's bytes. The plan sizes it
// once (workspace_sizes, cpu_backend.cpp); the hot loops never allocate.
#ifndef DILATTN_CPU_WORKSPACE_H
#define DILATTN_CPU_WORKSPACE_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"
#include "cpu_pair_weights.h"
#include "cpu_tile_loop.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

template <class T>
struct Workspace {
  // T = block_rows(p) rows each:
  T* block_a;  // [T][Dp]: Q of a piece (forward, dQ); dK accumulator (dK/dV)
  T* block_b;  // [T][Dp]: dO of a piece (dQ); dV accumulator (dK/dV)
  T* block_c;  // [T][Dp]: O accumulator (forward); dQ accumulator (dQ); K^T tiles (dK/dV)
  T* block_d;  // [T][Dp]: V^T tiles of a piece's keys (dK/dV)
  T* row_a;    // [T]: running max (forward); D_i = <dO_i, O_i> (backward)
  T* row_b;    // [T]: running sum (forward); LSE_i * log2(e) (backward)
  T* kt;       // [Dp][kBC]: K transposed
  T* vt;       // [Dp][kBC]: V transposed (backward)
  T* kv;       // [kBC][Dp]: V rows (forward), K rows (dQ)
  T* s;        // [kBR][kBC]: scores, then probabilities
  T* dp;       // [kBR][kBC]: dO V^T, then dS (backward)
  T* slope;    // [kBR][kBC]: the softcap's slope per pair (backward, cpu_variants.h)
  // bf16 pair products only (cpu_pair_dot.h), P and dS rounded to bf16 words, kBR x kBC words:
  T* low_a;    // P's row words (forward); dS's row words, then its column words (backward)
  T* low_b;    // P's column words (backward)
  PairWeightsMemo<T> pair_weights;  // per-pair weights of the last tile that had them, and its key
  T* tile_q;   // [kBR][Dp]: Q of a query tile (dK/dV)
  T* tile_do;  // [kBR][Dp]: dO of a query tile (dK/dV)
  T* tile_o;   // [kBR][Dp]: O rows while D_i is formed
  T* small;    // [kBR]: per-row factors
  // key_values each, one-pass backward only (null otherwise):
  T* keys_dk;  // [Nk][Dp]: dK of every key of the item's kv head
  T* keys_dv;  // [Nk][Dp]: dV of every key of the item's kv head
};

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Values of one of the one-pass backward's key accumulators (keys_dk, keys_dv).
inline int64_t key_accumulator_values(const Problem& p) {
  return round16(one_pass_keys(p) * padded(p.D));
}

// (kMemoInts int32 keys take as many values of T: room to spare for double.)
inline int64_t values_per_worker(int64_t D, int64_t T, int64_t key_values = 0) {
  const int64_t Dp = padded(D);
  return 4 * round16(T * Dp) + 2 * round16(T) + 3 * round16(Dp * kBC) +
         6 * round16(kBR * kBC) + round16(kMemoInts) + 3 * round16(kBR * Dp) + round16(kBR) + 2 * key_values +
         16;  // +16: alignment
}

// The plan's workspace query: what forward() and backward() carve, for the workers they run,
// in the compute type V of the plan's dtype.
// The forward and the two-pass backward size for every thread; the one-pass backward for
// min(threads, B x Hkv), the most workers its B x Hkv items can use (cpu_thread_pool.h).
template <class V>
inline WorkspaceBytes workspace_sizes_in(const Problem& p) {
  const int64_t threads = p.num_threads < 1 ? 1 : p.num_threads, T = block_rows(p);
  WorkspaceBytes w;
  w.forward = sizeof(V) * static_cast<size_t>(threads * values_per_worker(p.D, T));
  w.backward = w.forward;
  if (backward_one_pass<V>(p))
    w.backward = sizeof(V) *
                 static_cast<size_t>(min_i64(threads, one_pass_items(p)) *
                                     values_per_worker(p.D, T, key_accumulator_values(p)));
  return w;
}
inline WorkspaceBytes workspace_sizes(const Problem& p) {
  if (p.dtype == DILATTN_F64) return workspace_sizes_in<double>(p);  // computed in f64
  return workspace_sizes_in<float>(p);
}

template <class V>
inline Workspace<V> carve_workspace(void* workspace, int worker, int64_t D, int64_t T,
                                    int64_t key_values = 0) {
  const int64_t Dp = padded(D);
  uintptr_t at = reinterpret_cast<uintptr_t>(static_cast<V*>(workspace) +
                                             worker * values_per_worker(D, T, key_values));
  at = (at + 63) / 64 * 64;
  V* next = reinterpret_cast<V*>(at);
  auto take = [&](int64_t n) { V* t = next; next += round16(n); return t; };
  Workspace<V> s;
  s.block_a = take(T * Dp);
  s.block_b = take(T * Dp);
  s.block_c = take(T * Dp);
  s.block_d = take(T * Dp);
  s.row_a = take(T);
  s.row_b = take(T);
  s.kt = take(Dp * kBC);
  s.vt = take(Dp * kBC);
  s.kv = take(kBC * Dp);
  s.s = take(kBR * kBC);
  s.dp = take(kBR * kBC);
  s.slope = take(kBR * kBC);
  s.low_a = take(kBR * kBC);
  s.low_b = take(kBR * kBC);
  s.pair_weights.weights = take(kBR * kBC);
  s.pair_weights.key = reinterpret_cast<int32_t*>(take(kMemoInts));  // only read as int32
  s.pair_weights.key[0] = -1;                                          // nothing kept yet
  s.tile_q = take(kBR * Dp);
  s.tile_do = take(kBR * Dp);
  s.tile_o = take(kBR * Dp);
  s.small = take(kBR);
  s.keys_dk = key_values > 0 ? take(key_values) : nullptr;
  s.keys_dv = key_values > 0 ? take(key_values) : nullptr;
  return s;
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_WORKSPACE_H
