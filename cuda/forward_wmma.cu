// forward_wmma.cu - the tensor-core forward kernel: one branch of dense, dilated or
// block-sparse attention (SPEC 2-4) for f16 and bf16 inputs, head dims 64 and 128, with WMMA
// 16x16x16 tiles and f32 accumulation.
//
// One block of 128 threads (4 warps) per (query tile of BR = 16 rows, batch, head); the rows
// and keys are the same as the SIMT kernel's (attention_tile.cuh), only the two products run
// on tensor cores:
//   1. gather the tile's query rows into shared memory in the input dtype;
//   2. per chunk of BC = 64 keys: gather K and V rows; S = Q K^T, warp w computes the 16x16
//      block of keys 16w .. 16w+15 (K rows read as a column-major B operand); mask and scale,
//      online softmax per row (one warp per row, as in SIMT); P rounded to the input dtype
//      (as FlashAttention does); PV = P V, warp w computes the 16-column blocks w, w + 4, ...;
//      O = alpha O + PV in f32 shared memory (elementwise, so no fragment layout is assumed);
//   3. merge into the running (O, LSE) of the workspace.
//
// Launched by cuda/launch.cu; checked by tests/kernels/test_forward_kernels.cpp (emulator,
// against the reference) and tests/kernels/check_ptxas_spills.py (nvcc, no spills).
#include "attention_tile.cuh"

namespace dilattn {
namespace DILATTN_BACKEND_NS {

constexpr int kWmmaThreads = 128;
constexpr int kWmmaBr = 16;  // query rows per tile: one WMMA row block
constexpr int kWmmaBc = 64;  // keys per chunk: one 16-key block per warp
static_assert(kWmmaBc / 16 == kWmmaThreads / 32, "one 16-key block of S per warp");

template <class T>
struct WmmaTiles {
  T *q, *k, *v, *p;          // [BR][D], [BC][D], [BC][D], [BR][BC] in the input dtype
  float *s, *o, *pv;         // [BR][BC], [BR][D], [BR][D]
  float *m, *l, *alpha, *lse_old, *lse_new;
  int64_t *rows, *cnt, *span;
};

template <class T>
__host__ __device__ __forceinline__ size_t wmma_carve(unsigned char* base, int64_t D,
                                                      WmmaTiles<T>* t) {
  size_t off = 0;
  auto take = [&](size_t bytes) {
    unsigned char* ptr = base + off;
    off += smem_align(bytes);
    return ptr;
  };
  const size_t f = sizeof(float), e = sizeof(T), rd = static_cast<size_t>(D);
  t->q = reinterpret_cast<T*>(take(kWmmaBr * rd * e));
  t->k = reinterpret_cast<T*>(take(kWmmaBc * rd * e));
  t->v = reinterpret_cast<T*>(take(kWmmaBc * rd * e));
  t->p = reinterpret_cast<T*>(take(kWmmaBr * kWmmaBc * e));
  t->s = reinterpret_cast<float*>(take(kWmmaBr * kWmmaBc * f));
  t->o = reinterpret_cast<float*>(take(kWmmaBr * rd * f));
  t->pv = reinterpret_cast<float*>(take(kWmmaBr * rd * f));
  t->m = reinterpret_cast<float*>(take(kWmmaBr * f));
  t->l = reinterpret_cast<float*>(take(kWmmaBr * f));
  t->alpha = reinterpret_cast<float*>(take(kWmmaBr * f));
  t->lse_old = reinterpret_cast<float*>(take(kWmmaBr * f));
  t->lse_new = reinterpret_cast<float*>(take(kWmmaBr * f));
  t->rows = reinterpret_cast<int64_t*>(take(kWmmaBr * sizeof(int64_t)));
  t->cnt = reinterpret_cast<int64_t*>(take(kWmmaBr * sizeof(int64_t)));
  t->span = reinterpret_cast<int64_t*>(take(3 * sizeof(int64_t)));
  return off;
}

template <class T>
inline size_t wmma_smem_bytes(int64_t D) {
  WmmaTiles<T> t;
  return wmma_carve<T>(nullptr, D, &t);
}

template <class T, int D>
__global__ void forward_wmma_kernel(ForwardParams p) {
  using namespace nvcuda;
  DILATTN_DYNAMIC_SHARED(unsigned char, smem);
  WmmaTiles<T> s;
  wmma_carve<T>(smem, D, &s);
  const int tid = static_cast<int>(threadIdx.x), nt = static_cast<int>(blockDim.x);
  const int warp = tid >> 5, num_warps = nt >> 5;
  const int64_t tile = blockIdx.x;
  const int64_t b = blockIdx.y / p.H, h = blockIdx.y % p.H;
  const int64_t hk = kv_head_of(h, p.H, p.Hkv);

  for (int t = tid; t < kWmmaBr; t += nt) {
    s.rows[t] = tile_row(p, h, tile, t, kWmmaBr);
    s.m[t] = -INFINITY;
    s.l[t] = 0.0f;
  }
  __syncthreads();
  bool any_row = false;
  for (int t = 0; t < kWmmaBr; ++t) any_row = any_row || s.rows[t] >= 0;
  if (!any_row) return;  // uniform across the block

  const T zero = from_float<T>(0.0f);
  for (int idx = tid; idx < kWmmaBr * D; idx += nt) {
    const int t = idx / D, d = idx % D;
    const int64_t i = s.rows[t];
    s.q[idx] = i >= 0 ? static_cast<const T*>(p.q)[b * p.q_stride[0] + i * p.q_stride[1] +
                                                   h * p.q_stride[2] + d * p.q_stride[3]]
                      : zero;
    s.o[idx] = 0.0f;
  }

  const int64_t num_spans = tile_span_count(p, h, tile);
  for (int64_t span = 0; span < num_spans; ++span) {
    if (tid == 0) read_span(p, h, tile, span, s.rows, kWmmaBr, s.cnt, s.span);
    __syncthreads();
    const int64_t first = s.span[0], step = s.span[1], most = s.span[2];

    for (int64_t c0 = 0; c0 < most; c0 += kWmmaBc) {
      const int cn = static_cast<int>(min_i64(kWmmaBc, most - c0));
      // Gather keys and values (zero past the chunk, so the products there are exact zeros).
      for (int idx = tid; idx < kWmmaBc * D; idx += nt) {
        const int c = idx / D, d = idx % D;
        const int64_t j = first + step * (c0 + c);
        const T* kp = static_cast<const T*>(p.k);
        const T* vp = static_cast<const T*>(p.v);
        s.k[idx] = c < cn ? kp[b * p.k_stride[0] + j * p.k_stride[1] + hk * p.k_stride[2] +
                               d * p.k_stride[3]]
                          : zero;
        s.v[idx] = c < cn ? vp[b * p.v_stride[0] + j * p.v_stride[1] + hk * p.v_stride[2] +
                               d * p.v_stride[3]]
                          : zero;
      }
      __syncthreads();
      // S = Q K^T: warp w owns keys 16w .. 16w+15.
      for (int cb = warp; cb < kWmmaBc / 16; cb += num_warps) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < D; k0 += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> bt;
          wmma::load_matrix_sync(a, s.q + k0, D);
          wmma::load_matrix_sync(bt, s.k + cb * 16 * D + k0, D);
          wmma::mma_sync(acc, a, bt, acc);
        }
        wmma::store_matrix_sync(s.s + cb * 16, acc, kWmmaBc, wmma::mem_row_major);
      }
      __syncthreads();
      // Scale and mask: a key past the row's own count is -inf.
      for (int idx = tid; idx < kWmmaBr * kWmmaBc; idx += nt) {
        const int t = idx / kWmmaBc, c = idx % kWmmaBc;
        s.s[idx] = (c < cn && c0 + c < s.cnt[t]) ? s.s[idx] * p.scale : -INFINITY;
      }
      __syncthreads();
      for (int t = warp; t < kWmmaBr; t += num_warps)
        softmax_chunk_row(s.s + t * kWmmaBc, kWmmaBc, s.m + t, s.l + t, s.alpha + t);
      __syncthreads();
      for (int idx = tid; idx < kWmmaBr * kWmmaBc; idx += nt) s.p[idx] = from_float<T>(s.s[idx]);
      __syncthreads();
      // PV = P V: warp w owns output columns 16w .., 16(w + 4) .., ...
      for (int nb = warp; nb < D / 16; nb += num_warps) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::fill_fragment(acc, 0.0f);
        for (int k0 = 0; k0 < kWmmaBc; k0 += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major> bv;
          wmma::load_matrix_sync(a, s.p + k0, kWmmaBc);
          wmma::load_matrix_sync(bv, s.v + k0 * D + nb * 16, D);
          wmma::mma_sync(acc, a, bv, acc);
        }
        wmma::store_matrix_sync(s.pv + nb * 16, acc, D, wmma::mem_row_major);
      }
      __syncthreads();
      for (int idx = tid; idx < kWmmaBr * D; idx += nt)
        s.o[idx] = s.o[idx] * s.alpha[idx / D] + s.pv[idx];
      __syncthreads();
    }
    __syncthreads();  // span and cnt are rewritten by the next span
  }
  merge_tile_into_workspace(p, b, h, s.rows, s.o, s.m, s.l, s.lse_old, s.lse_new, kWmmaBr);
}

template __global__ void forward_wmma_kernel<__half, 64>(ForwardParams);
template __global__ void forward_wmma_kernel<__half, 128>(ForwardParams);
template __global__ void forward_wmma_kernel<__nv_bfloat16, 64>(ForwardParams);
template __global__ void forward_wmma_kernel<__nv_bfloat16, 128>(ForwardParams);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn
