// test_pool_workspace.cpp - plans take their workspace from a pool (lib/dispatch.cpp):
// the description's pool when set, else the default pool of the device, and give it back when
// the call ends. Checks: the pool's peak is the workspace block and nothing stays in use; the
// result equals a run with a caller workspace bit for bit; a too-small caller pool fails with
// its status and writes nothing; a pool on the wrong device is DEVICE_MISMATCH; a destroyed pool
// is POOL_DESTROYED; the default host pool grows past its arena instead of failing.
#include <cmath>
#include <cstdint>
#include <vector>

#include "pool_internal.h"
#include "pool_stats.h"

namespace {

constexpr int64_t B = 1, N = 16, H = 2, D = 8;

struct Tensors {
  std::vector<float> q, k, v, o, lse, d_o, dq, dk, dv;
  dilattn_tensor tq, tk, tv, to, tlse, tdo, tdq, tdk, tdv;
  Tensors() {
    const size_t n = static_cast<size_t>(B * N * H * D);
    for (auto* x : {&q, &k, &v, &o, &d_o, &dq, &dk, &dv}) x->assign(n, 0.0f);
    lse.assign(static_cast<size_t>(B * H * N), 0.0f);
    for (size_t i = 0; i < n; ++i) {
      q[i] = std::sin(0.37f * static_cast<float>(i));
      k[i] = std::cos(0.11f * static_cast<float>(i));
      v[i] = std::sin(0.05f * static_cast<float>(i) + 1.0f);
      d_o[i] = std::cos(0.23f * static_cast<float>(i) + 0.5f);
    }
    auto view = [](std::vector<float>& x) {
      return dilattn_tensor_contiguous(x.data(), DILATTN_F32, B, N, H, D);
    };
    tq = view(q), tk = view(k), tv = view(v), to = view(o), tdo = view(d_o);
    tdq = view(dq), tdk = view(dk), tdv = view(dv);
    tlse = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, B, H, N, 1);
  }
  dilattn_status forward(dilattn_plan plan) {
    return dilattn_forward(plan, &tq, &tk, &tv, &to, &tlse, nullptr, 0);
  }
  dilattn_status backward(dilattn_plan plan, void* ws, size_t ws_bytes) {
    return dilattn_backward(plan, &tq, &tk, &tv, &to, &tlse, &tdo, &tdq, &tdk, &tdv, ws, ws_bytes);
  }
};

dilattn_plan make_plan(dilattn_pool pool) {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  dilattn_desc_set_causal(desc, 1);
  if (pool != nullptr) CHECK_EQ(dilattn_desc_set_pool(desc, pool), DILATTN_SUCCESS);
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(B, N, N, H, H, D);
  CHECK_EQ(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_REF),
           DILATTN_SUCCESS);
  dilattn_desc_destroy(desc);
  return plan;
}

size_t pow2_at_least(size_t x) {
  size_t p = 256;
  while (p < x) p *= 2;
  return p;
}

}  // namespace

int main() {
  // Reference result: the caller passes the workspace.
  Tensors ref;
  dilattn_plan plain = make_plan(nullptr);
  size_t fwd_bytes = 0, bwd_bytes = 0;
  CHECK_EQ(dilattn_plan_workspace_size(plain, &fwd_bytes, &bwd_bytes), DILATTN_SUCCESS);
  CHECK(bwd_bytes > 4096);  // the reference backward accumulates in an f64 workspace
  std::vector<unsigned char> caller_ws(bwd_bytes);
  CHECK_EQ(ref.forward(plain), DILATTN_SUCCESS);
  CHECK_EQ(ref.backward(plain, caller_ws.data(), caller_ws.size()), DILATTN_SUCCESS);

  // 1. The description's pool: used for the call, given back at its end.
  dilattn_pool_options opt;
  dilattn_pool_options_init(&opt, 1 << 20);
  dilattn_pool pool = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&pool, &opt), DILATTN_SUCCESS);
  dilattn_plan pooled = make_plan(pool);
  Tensors t;
  CHECK_EQ(t.forward(pooled), DILATTN_SUCCESS);
  CHECK_EQ(t.backward(pooled, nullptr, 0), DILATTN_SUCCESS);
  dilattn_pool_stats s = pool_stats(pool);
  CHECK_EQ(s.peak_bytes_in_use, pow2_at_least(bwd_bytes));
  CHECK_EQ(s.bytes_in_use, size_t{0});
  CHECK_EQ(s.live_blocks, size_t{0});
  CHECK(t.dq == ref.dq && t.dk == ref.dk && t.dv == ref.dv);  // bit for bit

  // 2. A caller pool too small for the workspace: its status, and nothing written.
  dilattn_pool_options tiny_opt;
  dilattn_pool_options_init(&tiny_opt, 4096);
  dilattn_pool tiny = nullptr;
  CHECK_EQ(dilattn_pool_create_host(&tiny, &tiny_opt), DILATTN_SUCCESS);
  dilattn_plan starved = make_plan(tiny);
  Tensors u;
  CHECK_EQ(u.forward(starved), DILATTN_SUCCESS);
  u.dq.assign(u.dq.size(), 7.0f);
  CHECK_EQ(u.backward(starved, nullptr, 0), DILATTN_ERROR_POOL_TOO_LARGE);
  CHECK(u.dq[0] == 7.0f && u.dq.back() == 7.0f);
  CHECK_EQ(pool_stats(tiny).bytes_in_use, size_t{0});

  // 3. A pool on the wrong device (bookkeeping over a fake CUDA range; never dereferenced).
  alignas(256) static unsigned char fake[1 << 16];
  dilattn_pool device_pool = nullptr;
  CHECK_EQ(dilattn_pool_create_from_memory(&device_pool, fake, sizeof fake, 0,
                                           DILATTN_DEVICE_CUDA, 0),
           DILATTN_SUCCESS);
  dilattn_plan mismatched = make_plan(device_pool);
  CHECK_EQ(u.backward(mismatched, nullptr, 0), DILATTN_ERROR_DEVICE_MISMATCH);
  CHECK_EQ(pool_stats(device_pool).peak_bytes_in_use, size_t{0});

  // 4. A destroyed pool behind a plan.
  CHECK_EQ(dilattn_pool_destroy(tiny), DILATTN_SUCCESS);
  CHECK_EQ(u.backward(starved, nullptr, 0), DILATTN_ERROR_POOL_DESTROYED);

  // 5. The default host pool: used when the description has none, given back, and grown (not
  // failed) for a workspace larger than its arena.
  Tensors w;
  CHECK_EQ(w.forward(plain), DILATTN_SUCCESS);
  CHECK_EQ(w.backward(plain, nullptr, 0), DILATTN_SUCCESS);
  CHECK(w.dq == ref.dq);
  dilattn_pool host = nullptr;
  CHECK_EQ(dilattn::default_pool(DILATTN_DEVICE_CPU, 0, &host), DILATTN_SUCCESS);
  s = pool_stats(host);
  CHECK_EQ(s.peak_bytes_in_use, pow2_at_least(bwd_bytes));
  CHECK_EQ(s.bytes_in_use, size_t{0});
  void* big = nullptr;
  CHECK_EQ(dilattn::pool_allocate(host, dilattn::kDefaultHostArenaBytes + 1, &big),
           DILATTN_SUCCESS);
  s = pool_stats(host);
  CHECK_EQ(s.num_arenas, size_t{2});
  CHECK_EQ(s.bytes_in_use, 2 * dilattn::kDefaultHostArenaBytes);
  dilattn::pool_release(host, big);
  CHECK_EQ(pool_stats(host).bytes_in_use, size_t{0});

  for (dilattn_plan p : {plain, pooled, starved, mismatched}) dilattn_plan_destroy(p);
  CHECK_EQ(dilattn_pool_destroy(pool), DILATTN_SUCCESS);
  CHECK_EQ(dilattn_pool_destroy(device_pool), DILATTN_SUCCESS);
  return harness::finish("pool_workspace");
}
