// test_launch_stream.cpp - the CUDA backend's launcher (cuda/launch.cu, run as backend emu) on a
// caller's stream, with the emulator's deferred streams and runtime call counters
// (emu/simt_streams.h): what a CUDA graph capture and PyTorch's side streams need.
//
// Properties, each for a dense and a block-sparse plan (f32, B=1, N=40, H=2, Hkv=1, D=16):
//   1. dilattn_forward_on_stream returns before its work ran (deferred: O still poisoned),
//      every launch on the given stream, none on stream 0; after cudaStreamSynchronize O and
//      LSE equal the reference backend's (SPEC 8);
//   2. a warm call (the plan's pool already holds its block) makes no cudaMalloc, no
//      cudaDeviceSynchronize / cudaStreamSynchronize / cudaEventSynchronize, no synchronous
//      copy, no cudaGetDeviceProperties and no cudaFuncGetAttributes: the device's facts and
//      the block-sparse mask are the plan's (the mask is copied at plan time);
//   3. a pool workspace goes back to the pool only after the stream ran the call: the pool
//      still holds the block when the call returns, and the next call after the sync reuses
//      it (the pool does not grow);
//   4. the same after an error: the second launch of a call fails (injected), the call
//      returns DILATTN_ERROR_CUDA while its first kernel is still queued, and the block stays
//      in use until the stream ran it;
//   5. a capturing stream without a workspace of the caller's is refused (INVALID_VALUE, the
//      message naming 'workspace'; the pool block goes back at once, not through the graph),
//      with one every launch is captured (none runs) and no allocation or sync happens;
//   6. dilattn_forward keeps its behaviour: one cudaStreamSynchronize of stream 0, and the
//      outputs are written when it returns;
//   7. dilattn_backward_on_stream the same way: a warm call returns before its work ran, with
//      every launch on the stream and no allocation, sync, synchronous copy or property query;
//      after the sync dQ, dK, dV equal the reference backend's (SPEC 8).
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "dilattn.h"
#include "simt.h"
#include "spec_tolerance.h"

namespace {

int failures = 0;
#define EXPECT(cond, ...)                                                             \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      std::fprintf(stderr, "%s:%d: EXPECT(%s) failed: ", __FILE__, __LINE__, #cond); \
      std::fprintf(stderr, __VA_ARGS__);                                              \
      std::fprintf(stderr, " (last error: %s)\n", dilattn_last_error());             \
      ++failures;                                                                     \
    }                                                                                 \
  } while (0)

constexpr int64_t kN = 40, kH = 2, kHkv = 1, kD = 16;

struct Tensors {
  std::vector<float> q, k, v, o, lse;
  dilattn_tensor tq, tk, tv, to, tl;
  Tensors() : q(kN * kH * kD), k(kN * kHkv * kD), v(kN * kHkv * kD), o(kN * kH * kD), lse(kH * kN) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = std::sin(0.37 * double(i));
    for (size_t i = 0; i < k.size(); ++i) k[i] = std::cos(0.11 * double(i));
    for (size_t i = 0; i < v.size(); ++i) v[i] = std::sin(0.05 * double(i) + 1.0);
    tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, 1, kN, kH, kD);
    tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, 1, kN, kHkv, kD);
    tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, 1, kN, kHkv, kD);
    to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, 1, kN, kH, kD);
    tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, 1, kH, kN, 1);
    poison();
  }
  void poison() {
    std::fill(o.begin(), o.end(), -77.0f);
    std::fill(lse.begin(), lse.end(), -77.0f);
  }
  bool poisoned() const { return o[0] == -77.0f && o.back() == -77.0f && lse[0] == -77.0f; }
};

dilattn_plan make_plan(bool sparse, dilattn_backend backend, dilattn_pool pool) {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  if (sparse) {
    dilattn_mask mask = nullptr;
    dilattn_mask_from_pattern(&mask, "local:1+sink:1", kN, kN, 16, 8);
    dilattn_desc_set_block_sparse(desc, mask);
    dilattn_mask_destroy(mask);
  }
  if (pool != nullptr) dilattn_desc_set_pool(desc, pool);
  const dilattn_shape shape = dilattn_shape_make(1, kN, kN, kH, kHkv, kD);
  dilattn_plan plan = nullptr;
  const dilattn_status s = dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, backend);
  EXPECT(s == DILATTN_SUCCESS, "plan_create (sparse %d, backend %d)", sparse, backend);
  dilattn_desc_destroy(desc);
  return plan;
}

// O and LSE against the reference backend (SPEC 8, f32).
void expect_reference(const Tensors& t, bool sparse, const char* what) {
  Tensors ref;
  dilattn_plan plan = make_plan(sparse, DILATTN_BACKEND_REF, nullptr);
  EXPECT(dilattn_forward(plan, &ref.tq, &ref.tk, &ref.tv, &ref.to, &ref.tl, nullptr, 0) ==
             DILATTN_SUCCESS, "%s: reference", what);
  dilattn_plan_destroy(plan);
  const spec8::Tolerance tol = spec8::of(DILATTN_F32);
  int bad = 0;
  for (size_t i = 0; i < t.o.size(); ++i)
    bad += !(std::fabs(double(t.o[i]) - ref.o[i]) <= tol.atol + tol.rtol * std::fabs(ref.o[i]));
  for (size_t i = 0; i < t.lse.size(); ++i)
    bad += !(std::fabs(double(t.lse[i]) - ref.lse[i]) <= spec8::kLseAtol);
  EXPECT(bad == 0, "%s: %d elements differ from the reference (o[0] = %g, ref %g)", what, bad,
         double(t.o[0]), double(ref.o[0]));
}

size_t pool_in_use(dilattn_pool pool, size_t* arenas = nullptr) {
  dilattn_pool_stats stats;
  std::memset(&stats, 0, sizeof stats);
  stats.struct_size = sizeof stats;
  dilattn_pool_get_stats(pool, &stats);
  if (arenas != nullptr) *arenas = stats.num_arenas;
  return stats.bytes_in_use;
}

// 7: the backward on a stream, from the forward's O and LSE in t.
void check_backward_on_stream(dilattn_plan plan, cudaStream_t stream, const Tensors& t,
                              bool sparse) {
  const char* kind = sparse ? "block-sparse backward" : "dense backward";
  std::vector<float> d_o(t.o.size()), dq(t.q.size()), dk(t.k.size()), dv(t.v.size());
  for (size_t i = 0; i < d_o.size(); ++i) d_o[i] = std::cos(0.23 * double(i));
  const dilattn_tensor tdo = dilattn_tensor_contiguous(d_o.data(), DILATTN_F32, 1, kN, kH, kD);
  const dilattn_tensor tdq = dilattn_tensor_contiguous(dq.data(), DILATTN_F32, 1, kN, kH, kD);
  const dilattn_tensor tdk = dilattn_tensor_contiguous(dk.data(), DILATTN_F32, 1, kN, kHkv, kD);
  const dilattn_tensor tdv = dilattn_tensor_contiguous(dv.data(), DILATTN_F32, 1, kN, kHkv, kD);
  auto run = [&] {
    return dilattn_backward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, &tdo, &tdq,
                                      &tdk, &tdv, nullptr, 0);
  };
  EXPECT(run() == DILATTN_SUCCESS, "%s: warm-up", kind);  // the pool's block
  cudaStreamSynchronize(stream);
  simt::ScopedDeferredStreams deferred;
  std::fill(dq.begin(), dq.end(), -77.0f);
  const simt::RuntimeCalls before = simt::runtime_calls();
  const uint64_t on_stream = simt::launches_on(stream), on_legacy = simt::launches_on(nullptr);
  EXPECT(run() == DILATTN_SUCCESS, "%s: on stream", kind);
  const simt::RuntimeCalls after = simt::runtime_calls();
  EXPECT(dq[0] == -77.0f && dq.back() == -77.0f, "%s: dQ written before the stream ran", kind);
  EXPECT(after.mallocs == before.mallocs && after.device_syncs == before.device_syncs &&
             after.stream_syncs == before.stream_syncs && after.sync_copies == before.sync_copies &&
             after.device_properties == before.device_properties,
         "%s: allocation, sync, synchronous copy or property query in a warm call", kind);
  EXPECT(simt::launches_on(stream) - on_stream == after.launches - before.launches &&
             after.launches - before.launches >= 4 && simt::launches_on(nullptr) == on_legacy,
         "%s: %llu of %llu launches on the caller's stream", kind,
         static_cast<unsigned long long>(simt::launches_on(stream) - on_stream),
         static_cast<unsigned long long>(after.launches - before.launches));
  cudaStreamSynchronize(stream);
  // The reference backward from the same O and LSE (f32 views: the reference reads any dtype).
  std::vector<float> rq(dq.size()), rk(dk.size()), rv(dv.size());
  const dilattn_tensor trq = dilattn_tensor_contiguous(rq.data(), DILATTN_F32, 1, kN, kH, kD);
  const dilattn_tensor trk = dilattn_tensor_contiguous(rk.data(), DILATTN_F32, 1, kN, kHkv, kD);
  const dilattn_tensor trv = dilattn_tensor_contiguous(rv.data(), DILATTN_F32, 1, kN, kHkv, kD);
  dilattn_plan ref = make_plan(sparse, DILATTN_BACKEND_REF, nullptr);
  EXPECT(dilattn_backward(ref, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, &tdo, &trq, &trk, &trv, nullptr,
                          0) == DILATTN_SUCCESS, "%s: reference", kind);
  dilattn_plan_destroy(ref);
  const spec8::Tolerance tol = spec8::of(DILATTN_F32);
  int bad = 0;
  const std::vector<float>* got[3] = {&dq, &dk, &dv};
  const std::vector<float>* want[3] = {&rq, &rk, &rv};
  for (int g = 0; g < 3; ++g)
    for (size_t i = 0; i < got[g]->size(); ++i) {
      const double x = (*got[g])[i], r = (*want[g])[i];
      bad += !(std::fabs(x - r) <= tol.atol + tol.rtol * std::fabs(r));
    }
  EXPECT(bad == 0, "%s: %d gradient elements differ from the reference", kind, bad);
}

void check_plan(bool sparse) {
  const char* kind = sparse ? "block-sparse" : "dense";
  dilattn_pool pool = nullptr;
  dilattn_pool_options options;
  dilattn_pool_options_init(&options, size_t{1} << 20);
  EXPECT(dilattn_pool_create_host(&pool, &options) == DILATTN_SUCCESS, "pool");
  const simt::RuntimeCalls at_plan = simt::runtime_calls();
  dilattn_plan plan = make_plan(sparse, DILATTN_BACKEND_EMU, pool);
  const simt::RuntimeCalls planned = simt::runtime_calls();
  if (sparse)  // the mask goes to the device here, once
    EXPECT(planned.sync_copies - at_plan.sync_copies == 3, "%s: %llu copies at plan time", kind,
           static_cast<unsigned long long>(planned.sync_copies - at_plan.sync_copies));
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  Tensors t;

  // Warm-up: the pool's block and the device's facts.
  EXPECT(dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0) ==
             DILATTN_SUCCESS, "%s: warm-up", kind);
  cudaStreamSynchronize(stream);
  expect_reference(t, sparse, kind);

  {  // 1, 2, 3
    simt::ScopedDeferredStreams deferred;
    t.poison();
    const simt::RuntimeCalls before = simt::runtime_calls();
    const uint64_t on_stream = simt::launches_on(stream), on_legacy = simt::launches_on(nullptr);
    EXPECT(dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr,
                                     0) == DILATTN_SUCCESS, "%s: on stream", kind);
    const simt::RuntimeCalls after = simt::runtime_calls();
    EXPECT(t.poisoned(), "%s: the outputs were written before the stream ran", kind);
    EXPECT(after.mallocs == before.mallocs, "%s: cudaMalloc in a warm call", kind);
    EXPECT(after.device_syncs == before.device_syncs && after.stream_syncs == before.stream_syncs &&
               after.event_syncs == before.event_syncs,
           "%s: a host synchronisation in a call on a stream", kind);
    EXPECT(after.sync_copies == before.sync_copies, "%s: %llu synchronous copies per call", kind,
           static_cast<unsigned long long>(after.sync_copies - before.sync_copies));
    EXPECT(after.device_properties == before.device_properties &&
               after.func_attributes == before.func_attributes,
           "%s: device properties asked per call (%llu)", kind,
           static_cast<unsigned long long>(after.device_properties - before.device_properties));
    EXPECT(simt::launches_on(stream) - on_stream == after.launches - before.launches &&
               after.launches - before.launches >= 3 && simt::launches_on(nullptr) == on_legacy,
           "%s: %llu of %llu launches on the caller's stream", kind,
           static_cast<unsigned long long>(simt::launches_on(stream) - on_stream),
           static_cast<unsigned long long>(after.launches - before.launches));
    const size_t held = pool_in_use(pool);
    EXPECT(held > 0, "%s: the workspace went back to the pool before the stream ran", kind);
    cudaStreamSynchronize(stream);
    expect_reference(t, sparse, kind);
    size_t arenas_before = 0, arenas_after = 0;
    pool_in_use(pool, &arenas_before);
    EXPECT(dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr,
                                     0) == DILATTN_SUCCESS, "%s: next call", kind);
    EXPECT(pool_in_use(pool, &arenas_after) == held && arenas_after == arenas_before,
           "%s: the next call did not reuse the block", kind);
    cudaStreamSynchronize(stream);
  }

  {  // 4: an error after the first launch
    simt::ScopedDeferredStreams deferred;
    simt::fail_launch_after(1);
    const dilattn_status s =
        dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0);
    simt::fail_launch_after(-1);
    EXPECT(s == DILATTN_ERROR_CUDA, "%s: injected failure gave %s", kind,
           dilattn_status_string(s));
    cudaGetLastError();
    EXPECT(pool_in_use(pool) > 0,
           "%s: an early error return gave the workspace back while a kernel was queued", kind);
    cudaStreamSynchronize(stream);
  }

  {  // 5: capture
    std::vector<unsigned char> own(1 << 16);
    size_t need = 0;
    dilattn_plan_workspace_size(plan, &need, nullptr);
    EXPECT(need <= own.size(), "%s: workspace %zu", kind, need);
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    t.poison();
    const dilattn_status refused =
        dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0);
    EXPECT(refused == DILATTN_ERROR_INVALID_VALUE &&
               std::string(dilattn_last_error()).find("'workspace'") != std::string::npos,
           "%s: capture with a pool workspace gave %s", kind, dilattn_status_string(refused));
    EXPECT(t.poisoned(), "%s: a refused call wrote the outputs", kind);
    EXPECT(pool_in_use(pool) == 0, "%s: the refused call's pool block was not given back", kind);
    const simt::RuntimeCalls before = simt::runtime_calls();
    const uint64_t captured = simt::captured_on(stream);
    EXPECT(dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, own.data(),
                                     own.size()) == DILATTN_SUCCESS, "%s: capture", kind);
    const simt::RuntimeCalls after = simt::runtime_calls();
    EXPECT(after.mallocs == before.mallocs && after.stream_syncs == before.stream_syncs &&
               after.device_syncs == before.device_syncs && after.sync_copies == before.sync_copies,
           "%s: allocation or synchronisation while capturing", kind);
    EXPECT(simt::captured_on(stream) - captured == after.launches - before.launches &&
               t.poisoned(),
           "%s: work of a captured call ran, or went elsewhere than the stream", kind);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
  }

  {  // 6: the plain call
    t.poison();
    const simt::RuntimeCalls before = simt::runtime_calls();
    EXPECT(dilattn_forward(plan, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0) ==
               DILATTN_SUCCESS, "%s: plain", kind);
    const simt::RuntimeCalls after = simt::runtime_calls();
    EXPECT(after.stream_syncs - before.stream_syncs == 1, "%s: plain call syncs %llu times",
           kind, static_cast<unsigned long long>(after.stream_syncs - before.stream_syncs));
    expect_reference(t, sparse, kind);
    EXPECT(pool_in_use(pool) == 0, "%s: the plain call kept its block", kind);
  }
  check_backward_on_stream(plan, stream, t, sparse);
  cudaStreamDestroy(stream);
  dilattn_plan_destroy(plan);
  dilattn_pool_destroy(pool);
}

}  // namespace

int main() {
  check_plan(false);
  check_plan(true);
  std::printf("test_launch_stream: %d failure(s)\n", failures);
  return failures == 0 ? 0 : 1;
}
