// forward_simt.cu - the SIMT forward kernel: one branch of dense, dilated or block-sparse
// attention (SPEC 2-4) for f32, f16 and bf16 inputs, f32 accumulation, any head dim <= 256.
//
// One block of 128 threads (4 warps) per (query tile of BR = 16 rows, batch, head):
//   1. gather the tile's query rows (attention_tile.cuh: tile_row) into shared memory, as f32;
//   2. for each key span (one, or one per listed BSR block) and each chunk of BC = 32 keys of
//      it: gather K and V rows into shared memory, S = scale * Q K^T with each row's own key
//      count (causal cut), one warp per row does the online softmax (m, l), O = alpha O + P V;
//   3. merge (O / l, m + log l) into the running (O, LSE) of the workspace (SPEC 5's form).
// Every tile lives in shared memory (no per-thread arrays: no local memory, no spills) and
// every output element is summed by one thread in a fixed order, so results are bitwise the
// same whatever order the threads run in.
//
// Launched by cuda/launch.cu; checked by tests/kernels/test_forward_kernels.cpp (emulator,
// against the reference) and tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "attention_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

constexpr int kSimtThreads = 128;
constexpr int kSimtBr = 16;  // query rows per tile
constexpr int kSimtBc = 32;  // keys per chunk
static_assert(kSimtBr % (kSimtThreads / 32) == 0, "the warps share the tile's rows evenly");

// The tiles of one block, carved from dynamic shared memory.
struct SimtTiles {
  float *q, *k, *v, *o, *s;          // [BR][D], [BC][D], [BC][D], [BR][D], [BR][BC]
  float *m, *l, *alpha, *lse_old, *lse_new;  // [BR] each
  int64_t *rows, *cnt, *span;        // [BR], [BR], {first, step, count}
};

// Carves base (may be null: only the size is wanted) and returns the bytes used.
__host__ __device__ __forceinline__ size_t simt_carve(unsigned char* base, int64_t D,
                                                      SimtTiles* t) {
  size_t off = 0;
  auto take = [&](size_t bytes) {
    unsigned char* ptr = base + off;
    off += smem_align(bytes);
    return ptr;
  };
  const size_t f = sizeof(float), rd = static_cast<size_t>(D);
  t->q = reinterpret_cast<float*>(take(kSimtBr * rd * f));
  t->k = reinterpret_cast<float*>(take(kSimtBc * rd * f));
  t->v = reinterpret_cast<float*>(take(kSimtBc * rd * f));
  t->o = reinterpret_cast<float*>(take(kSimtBr * rd * f));
  t->s = reinterpret_cast<float*>(take(kSimtBr * kSimtBc * f));
  t->m = reinterpret_cast<float*>(take(kSimtBr * f));
  t->l = reinterpret_cast<float*>(take(kSimtBr * f));
  t->alpha = reinterpret_cast<float*>(take(kSimtBr * f));
  t->lse_old = reinterpret_cast<float*>(take(kSimtBr * f));
  t->lse_new = reinterpret_cast<float*>(take(kSimtBr * f));
  t->rows = reinterpret_cast<int64_t*>(take(kSimtBr * sizeof(int64_t)));
  t->cnt = reinterpret_cast<int64_t*>(take(kSimtBr * sizeof(int64_t)));
  t->span = reinterpret_cast<int64_t*>(take(3 * sizeof(int64_t)));
  return off;
}

inline size_t simt_smem_bytes(int64_t D) {
  SimtTiles t;
  return simt_carve(nullptr, D, &t);
}

// No __launch_bounds__(128): with it ptxas 13 spills 40 bytes in the f16/bf16 versions (seen
// in the ptxas report), without it none, at 84-96 registers.
template <class T>
__global__ void forward_simt_kernel(ForwardParams p) {
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  SimtTiles s;
  simt_carve(smem, p.D, &s);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int warp = tid >> 5, num_warps = nt >> 5;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);
  const int64_t D = p.D;

  // The tile's query rows (-1: none) and fresh softmax state.
  for (int t = tid; t < kSimtBr; t += nt) {
    s.rows[t] = tile_row(p, h, tile, t, kSimtBr);
    s.m[t] = -INFINITY;
    s.l[t] = 0.0f;
  }
  __syncthreads();
  bool any_row = false;
  for (int t = 0; t < kSimtBr; ++t) any_row = any_row || s.rows[t] >= 0;
  if (!any_row) return;  // the same answer in every thread: no barrier is skipped by some only

  for (int64_t idx = tid; idx < kSimtBr * D; idx += nt) {
    const int64_t t = idx / D, d = idx % D, i = s.rows[t];
    s.q[idx] = i >= 0 ? load_bnhd<T>(p.q, p.q_stride, b, i, h, d) : 0.0f;
    s.o[idx] = 0.0f;
  }

  const int64_t num_spans = tile_span_count(p, h, tile);
  for (int64_t span = 0; span < num_spans; ++span) {
    // Thread 0 reads each row's key progression: shared first and step, own count.
    if (tid == 0) read_span(p, h, tile, span, s.rows, kSimtBr, s.cnt, s.span);
    __syncthreads();
    const int64_t first = s.span[0], step = s.span[1], most = s.span[2];

    for (int64_t c0 = 0; c0 < most; c0 += kSimtBc) {
      const int64_t cn = min_i64(kSimtBc, most - c0);  // keys in this chunk
      // Gather the chunk's key and value rows (zero past the chunk: P there is 0, and 0 * 0).
      for (int64_t idx = tid; idx < kSimtBc * D; idx += nt) {
        const int64_t c = idx / D, d = idx % D;
        const int64_t j = first + step * (c0 + c);
        s.k[idx] = c < cn ? load_bnhd<T>(p.k, p.k_stride, b, j, hk, d) : 0.0f;
        s.v[idx] = c < cn ? load_bnhd<T>(p.v, p.v_stride, b, j, hk, d) : 0.0f;
      }
      __syncthreads();
      // Scores; a key past the row's own count (causal cut, other rows' keys) is -inf.
      for (int64_t idx = tid; idx < kSimtBr * kSimtBc; idx += nt) {
        const int64_t t = idx / kSimtBc, c = idx % kSimtBc;
        float score = -INFINITY;
        if (c < cn && c0 + c < s.cnt[t]) {
          float dot = 0.0f;
          for (int64_t d = 0; d < D; ++d) dot += s.q[t * D + d] * s.k[c * D + d];
          score = dot * p.scale;
        }
        s.s[idx] = score;
      }
      __syncthreads();
      // Online softmax, one warp per row.
      for (int t = warp; t < kSimtBr; t += num_warps)
        softmax_chunk_row(s.s + t * kSimtBc, static_cast<int>(cn), s.m + t, s.l + t,
                          s.alpha + t);
      __syncthreads();
      // O = alpha O + P V.
      for (int64_t idx = tid; idx < kSimtBr * D; idx += nt) {
        const int64_t t = idx / D, d = idx % D;
        float acc = s.o[idx] * s.alpha[t];
        for (int64_t c = 0; c < cn; ++c) acc += s.s[t * kSimtBc + c] * s.v[c * D + d];
        s.o[idx] = acc;
      }
      __syncthreads();
    }
    __syncthreads();  // span and cnt are rewritten by the next span
  }
  merge_tile_into_workspace(p, b, h, s.rows, s.o, s.m, s.l, s.lse_old, s.lse_new, kSimtBr);
}

template __global__ void forward_simt_kernel<float>(ForwardParams);
template __global__ void forward_simt_kernel<__half>(ForwardParams);
template __global__ void forward_simt_kernel<__nv_bfloat16>(ForwardParams);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
