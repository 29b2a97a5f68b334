// cpu_workspace.h - each worker's f32 tiles, carved from the plan's workspace.
//
// The workspace is workers x floats_per_worker(D, T, key_floats) floats, T = block_rows(p) <=
// 1024: O(threads x tile), never O(N^2) and never O(N x segment), except that the one-pass
// backward (backward_one_pass, cpu_tile_loop.h) adds its dK and dV accumulators of all Nk keys,
// 2 x Nk x padded(D) floats per worker (key_floats each), on at most min(threads, B x Hkv)
// workers: at most the size of dK and dV in f32, and at most 64 MiB per worker. Tiles start
// on 64-byte boundaries. One layout serves forward and backward (the forward leaves some tiles
// unused). The plan sizes it once (workspace_sizes, cpu_backend.cpp); the hot loops never
// allocate.
#ifndef DILATTN_CPU_WORKSPACE_H
#define DILATTN_CPU_WORKSPACE_H

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"
#include "cpu_pair_weights.h"
#include "cpu_tile_loop.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

struct Workspace {
  // T = block_rows(p) rows each:
  float* block_a;  // [T][Dp]: Q of a piece (forward, dQ); dK accumulator (dK/dV)
  float* block_b;  // [T][Dp]: dO of a piece (dQ); dV accumulator (dK/dV)
  float* block_c;  // [T][Dp]: O accumulator (forward); dQ accumulator (dQ); K^T tiles (dK/dV)
  float* block_d;  // [T][Dp]: V^T tiles of a piece's keys (dK/dV)
  float* row_a;    // [T]: running max (forward); D_i = <dO_i, O_i> (backward)
  float* row_b;    // [T]: running sum (forward); LSE_i * log2(e) (backward)
  float* kt;       // [Dp][kBC]: K transposed
  float* vt;       // [Dp][kBC]: V transposed (backward)
  float* kv;       // [kBC][Dp]: V rows (forward), K rows (dQ)
  float* s;        // [kBR][kBC]: scores, then probabilities
  float* dp;       // [kBR][kBC]: dO V^T, then dS (backward)
  PairWeightsMemo pair_weights;  // per-pair weights of the last tile that had them, and its key
  float* tile_q;   // [kBR][Dp]: Q of a query tile (dK/dV)
  float* tile_do;  // [kBR][Dp]: dO of a query tile (dK/dV)
  float* tile_o;   // [kBR][Dp]: O rows while D_i is formed
  float* small;    // [kBR]: per-row factors
  // key_floats each, one-pass backward only (null otherwise):
  float* keys_dk;  // [Nk][Dp]: dK of every key of the item's kv head
  float* keys_dv;  // [Nk][Dp]: dV of every key of the item's kv head
};

inline int64_t round16(int64_t n) { return (n + 15) / 16 * 16; }

// Floats of one of the one-pass backward's key accumulators (keys_dk, keys_dv).
inline int64_t key_accumulator_floats(const Problem& p) { return round16(p.Nk * padded(p.D)); }

inline int64_t floats_per_worker(int64_t D, int64_t T, int64_t key_floats = 0) {
  const int64_t Dp = padded(D);
  return 4 * round16(T * Dp) + 2 * round16(T) + 3 * round16(Dp * kBC) +
         3 * round16(kBR * kBC) + round16(kMemoInts) + 3 * round16(kBR * Dp) + round16(kBR) + 2 * key_floats +
         16;  // +16: alignment
}

// The plan's workspace query: what forward() and backward() carve, for the workers they run.
// The forward and the two-pass backward size for every thread; the one-pass backward for
// min(threads, B x Hkv), the most workers its B x Hkv items can use (cpu_thread_pool.h).
inline WorkspaceBytes workspace_sizes(const Problem& p) {
  const int64_t threads = p.num_threads < 1 ? 1 : p.num_threads, T = block_rows(p);
  WorkspaceBytes w;
  w.forward = sizeof(float) * static_cast<size_t>(threads * floats_per_worker(p.D, T));
  w.backward = w.forward;
  if (backward_one_pass(p))
    w.backward = sizeof(float) *
                 static_cast<size_t>(min_i64(threads, p.B * p.Hkv) *
                                     floats_per_worker(p.D, T, key_accumulator_floats(p)));
  return w;
}

inline Workspace carve_workspace(void* workspace, int worker, int64_t D, int64_t T,
                                 int64_t key_floats = 0) {
  const int64_t Dp = padded(D);
  uintptr_t at = reinterpret_cast<uintptr_t>(static_cast<float*>(workspace) +
                                             worker * floats_per_worker(D, T, key_floats));
  at = (at + 63) / 64 * 64;
  float* next = reinterpret_cast<float*>(at);
  auto take = [&](int64_t n) { float* t = next; next += round16(n); return t; };
  Workspace s;
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
  s.pair_weights.weights = take(kBR * kBC);
  s.pair_weights.key = reinterpret_cast<int32_t*>(take(kMemoInts));  // only read as int32
  s.pair_weights.key[0] = -1;                                          // nothing kept yet
  s.tile_q = take(kBR * Dp);
  s.tile_do = take(kBR * Dp);
  s.tile_o = take(kBR * Dp);
  s.small = take(kBR);
  s.keys_dk = key_floats > 0 ? take(key_floats) : nullptr;
  s.keys_dv = key_floats > 0 ? take(key_floats) : nullptr;
  return s;
}

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_WORKSPACE_H
