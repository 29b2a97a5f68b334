// test_launch_stream.cpp - the CUDA backend's launcher (cuda/launch.cu, run as backend emu) on a
// caller's stream, with the emulator's deferred streams and runtime call counters
// (emu/simt_streams.h): what a CUDA graph capture and PyTorch's side streams need.
//
// Properties, each for a dense, a block-sparse and a two-branch dilated plan (f32, B=1, N=40,
// H=2, Hkv=1, D=16). The one-branch plans (dense, block-sparse) need no workspace: their
// kernel writes O and LSE itself in one launch (cuda/forward_outputs.cuh); the dilated plan
// merges its branches in a pool workspace (init, a launch per branch, finalize).
//   1. dilattn_forward_on_stream returns before its work ran (deferred: O still poisoned),
//      every launch on the given stream, none on stream 0 (one launch for a one-branch plan,
//      at least five for the dilated one); after cudaStreamSynchronize O and LSE equal the
//      reference backend's (SPEC 8);
//   2. a warm call (the plan's pool already holds its block) makes no cudaMalloc, no
//      cudaDeviceSynchronize / cudaStreamSynchronize / cudaEventSynchronize, no synchronous
//      copy, no cudaGetDeviceProperties and no cudaFuncGetAttributes: the device's facts and
//      the block-sparse mask are the plan's (the mask is copied at plan time);
//   3. a pool workspace goes back to the pool only after the stream ran the call: the pool
//      still holds the block when the call returns, and the next call after the sync reuses
//      it (the pool does not grow); a one-branch plan takes no block at all;
//   4. the same after an error: the second launch of a call fails (injected), the call
//      returns DILATTN_ERROR_CUDA while its first kernel is still queued, and the block stays
//      in use until the stream ran it (one-branch: its only launch fails, DILATTN_ERROR_CUDA);
//   5. a capturing stream without a workspace of the caller's is refused (INVALID_VALUE, the
//      message naming 'workspace'; the pool block goes back at once, not through the graph),
//      with one every launch is captured (none runs) and no allocation or sync happens; a
//      one-branch plan needs no workspace, so its call without one is captured;
//   6. dilattn_forward keeps its behaviour: one cudaStreamSynchronize of stream 0, and the
//      outputs are written when it returns;
//   7. dilattn_backward_on_stream the same way: a warm call returns before its work ran, with
//      every launch on the stream and no allocation, sync, synchronous copy or property query;
//      after the sync dQ, dK, dV equal the reference backend's (SPEC 8);
//   8. a plan with dropout and sinks through dilattn_forward_on_stream_ex and
//      dilattn_backward_on_stream_ex: each call returns before its work ran, every launch on
//      the stream; after the sync O, LSE, dQ, dK, dV and d_sinks are bitwise those of
//      dilattn_forward_ex / dilattn_backward_ex on the same plan (the same decisions, SPEC
//      11.1); the stream call without options is refused, naming p, and writes nothing.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../common/test_backend.h"
#include "check.h"
#include "compare.h"
#include "dilattn.h"
#include "simt.h"
#include "spec_tolerance.h"

namespace {

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

enum class Kind { dense, sparse, dilated };

const char* name_of(Kind kind) {
  return kind == Kind::dense ? "dense" : kind == Kind::sparse ? "block-sparse" : "dilated";
}

dilattn_plan make_plan(Kind kind, dilattn_backend backend, dilattn_pool pool,
                       double dropout_p = 0, bool sinks = false) {
  dilattn_desc desc = nullptr;
  dilattn_desc_create(&desc);
  if (dropout_p > 0) dilattn_desc_set_dropout(desc, dropout_p);
  if (sinks) dilattn_desc_set_sinks(desc, 1);
  if (kind == Kind::dilated) {
    const int64_t segments[] = {16, 40}, dilations[] = {1, 2};
    dilattn_desc_set_dilated(desc, 2, segments, dilations, DILATTN_HEADS_MOD);
  }
  if (kind == Kind::sparse) {
    dilattn_mask mask = nullptr;
    dilattn_mask_from_pattern(&mask, "local:1+sink:1", kN, kN, 16, 8);
    dilattn_desc_set_block_sparse(desc, mask);
    dilattn_mask_destroy(mask);
  }
  if (pool != nullptr) dilattn_desc_set_pool(desc, pool);
  const dilattn_shape shape = dilattn_shape_make(1, kN, kN, kH, kHkv, kD);
  dilattn_plan plan = nullptr;
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, backend));
  dilattn_desc_destroy(desc);
  return plan;
}

std::vector<double> widened(const std::vector<float>& x) { return {x.begin(), x.end()}; }

// O and LSE against the reference backend (SPEC 8, f32).
void expect_reference(const Tensors& t, Kind kind) {
  Tensors ref;
  dilattn_plan plan = make_plan(kind, DILATTN_BACKEND_REF, nullptr);
  CHECK_OK(dilattn_forward(plan, &ref.tq, &ref.tk, &ref.tv, &ref.to, &ref.tl, nullptr, 0));
  dilattn_plan_destroy(plan);
  CHECK_CLOSE("O", widened(t.o), widened(ref.o), spec8::of(DILATTN_F32));
  CHECK_CLOSE("LSE", widened(t.lse), widened(ref.lse), spec8::lse());
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
                              Kind kind) {
  harness::CaseScope scope(std::string(name_of(kind)) + " backward");
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
  CHECK_OK(run());  // the pool's block
  cudaStreamSynchronize(stream);
  simt::ScopedDeferredStreams deferred;
  std::fill(dq.begin(), dq.end(), -77.0f);
  const simt::RuntimeCalls before = simt::runtime_calls();
  const uint64_t on_stream = simt::launches_on(stream), on_legacy = simt::launches_on(nullptr);
  CHECK_OK(run());
  const simt::RuntimeCalls after = simt::runtime_calls();
  CHECK_MSG(dq[0] == -77.0f && dq.back() == -77.0f, "dQ written before the stream ran");
  CHECK_MSG(after.mallocs == before.mallocs && after.device_syncs == before.device_syncs &&
                after.stream_syncs == before.stream_syncs &&
                after.sync_copies == before.sync_copies &&
                after.device_properties == before.device_properties,
            "allocation, sync, synchronous copy or property query in a warm call");
  CHECK_MSG(simt::launches_on(stream) - on_stream == after.launches - before.launches &&
                after.launches - before.launches >= 4 && simt::launches_on(nullptr) == on_legacy,
            "%llu of %llu launches on the caller's stream",
            static_cast<unsigned long long>(simt::launches_on(stream) - on_stream),
            static_cast<unsigned long long>(after.launches - before.launches));
  cudaStreamSynchronize(stream);
  // The reference backward from the same O and LSE (f32 views: the reference reads any dtype).
  std::vector<float> rq(dq.size()), rk(dk.size()), rv(dv.size());
  const dilattn_tensor trq = dilattn_tensor_contiguous(rq.data(), DILATTN_F32, 1, kN, kH, kD);
  const dilattn_tensor trk = dilattn_tensor_contiguous(rk.data(), DILATTN_F32, 1, kN, kHkv, kD);
  const dilattn_tensor trv = dilattn_tensor_contiguous(rv.data(), DILATTN_F32, 1, kN, kHkv, kD);
  dilattn_plan ref = make_plan(kind, DILATTN_BACKEND_REF, nullptr);
  CHECK_OK(dilattn_backward(ref, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, &tdo, &trq, &trk, &trv,
                            nullptr, 0));
  dilattn_plan_destroy(ref);
  const spec8::Tolerance tol = spec8::of(DILATTN_F32);
  CHECK_CLOSE("dQ", widened(dq), widened(rq), tol);
  CHECK_CLOSE("dK", widened(dk), widened(rk), tol);
  CHECK_CLOSE("dV", widened(dv), widened(rv), tol);
}

// Launches of the last deferred call, and whether all of them went to `stream`.
struct LaunchCount {
  uint64_t on_stream = 0, all = 0, on_legacy = 0;
  LaunchCount(cudaStream_t stream)
      : on_stream(simt::launches_on(stream)), all(simt::runtime_calls().launches),
        on_legacy(simt::launches_on(nullptr)) {}
  bool all_on(cudaStream_t stream) const {
    const uint64_t launched = simt::runtime_calls().launches - all;
    return launched >= 1 && simt::launches_on(stream) - on_stream == launched &&
           simt::launches_on(nullptr) == on_legacy;
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// 8: dropout and sinks on a stream.
void check_options_on_stream(Kind kind) {
  harness::CaseScope scope(std::string(name_of(kind)) + " dropout and sinks");
  dilattn_plan plan = make_plan(kind, DILATTN_BACKEND_EMU, nullptr, 0.25, true);
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  const double sink_logits[kH] = {-0.5, 1.25};
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_seed = 0x0123456789abcdefull;
  options.dropout_offset = 42;
  options.sinks = sink_logits;

  Tensors want, got;
  CHECK_OK(dilattn_forward_ex(plan, &want.tq, &want.tk, &want.tv, &want.to, &want.tl, &options,
                              nullptr, 0));
  CHECK_ERROR(dilattn_forward_on_stream_ex(plan, stream, &got.tq, &got.tk, &got.tv, &got.to,
                                           &got.tl, nullptr, nullptr, 0),
              DILATTN_ERROR_INVALID_VALUE, "dropout p = 0.25");
  CHECK_MSG(got.poisoned(), "a refused call wrote the outputs");
  {
    simt::ScopedDeferredStreams deferred;
    const LaunchCount count(stream);
    CHECK_OK(dilattn_forward_on_stream_ex(plan, stream, &got.tq, &got.tk, &got.tv, &got.to,
                                          &got.tl, &options, nullptr, 0));
    CHECK_MSG(got.poisoned(), "the forward's outputs were written before the stream ran");
    CHECK_MSG(count.all_on(stream), "a forward launch went elsewhere than the caller's stream");
    cudaStreamSynchronize(stream);
  }
  CHECK_MSG(same_bits(got.o, want.o) && same_bits(got.lse, want.lse),
            "O or LSE on the stream differ from dilattn_forward_ex's");

  const size_t nq = want.q.size(), nk = want.k.size();
  std::vector<float> d_o(nq), want_dq(nq), want_dk(nk), want_dv(nk), got_dq(nq, -77.0f),
      got_dk(nk), got_dv(nk);
  for (size_t i = 0; i < nq; ++i) d_o[i] = std::cos(0.23 * double(i));
  auto view = [](std::vector<float>& x, int64_t heads) {
    return dilattn_tensor_contiguous(x.data(), DILATTN_F32, 1, kN, heads, kD);
  };
  const dilattn_tensor tdo = view(d_o, kH);
  const dilattn_tensor wq = view(want_dq, kH), wk = view(want_dk, kHkv), wv = view(want_dv, kHkv);
  const dilattn_tensor gq = view(got_dq, kH), gk = view(got_dk, kHkv), gv = view(got_dv, kHkv);
  double want_d_sinks[kH] = {0, 0}, got_d_sinks[kH] = {-77, -77};
  options.d_sinks = want_d_sinks;
  CHECK_OK(dilattn_backward_ex(plan, &want.tq, &want.tk, &want.tv, &want.to, &want.tl, &tdo, &wq,
                               &wk, &wv, &options, nullptr, 0));
  options.d_sinks = got_d_sinks;
  {
    simt::ScopedDeferredStreams deferred;
    const LaunchCount count(stream);
    CHECK_OK(dilattn_backward_on_stream_ex(plan, stream, &want.tq, &want.tk, &want.tv, &want.to,
                                           &want.tl, &tdo, &gq, &gk, &gv, &options, nullptr, 0));
    CHECK_MSG(got_dq[0] == -77.0f && got_dq.back() == -77.0f,
              "dQ was written before the stream ran");
    CHECK_MSG(count.all_on(stream), "a backward launch went elsewhere than the caller's stream");
    cudaStreamSynchronize(stream);
  }
  CHECK_MSG(same_bits(got_dq, want_dq) && same_bits(got_dk, want_dk) &&
                same_bits(got_dv, want_dv),
            "dQ, dK or dV on the stream differ from dilattn_backward_ex's");
  CHECK_MSG(std::memcmp(got_d_sinks, want_d_sinks, sizeof got_d_sinks) == 0,
            "d_sinks on the stream (%g, %g) differ from dilattn_backward_ex's (%g, %g)",
            got_d_sinks[0], got_d_sinks[1], want_d_sinks[0], want_d_sinks[1]);
  cudaStreamDestroy(stream);
  dilattn_plan_destroy(plan);
}

void check_plan(Kind kind) {
  harness::CaseScope scope(name_of(kind));
  const bool sparse = kind == Kind::sparse, workspace = kind == Kind::dilated;
  dilattn_pool pool = nullptr;
  dilattn_pool_options options;
  dilattn_pool_options_init(&options, size_t{1} << 20);
  CHECK_OK(dilattn_pool_create_host(&pool, &options));
  const simt::RuntimeCalls at_plan = simt::runtime_calls();
  dilattn_plan plan = make_plan(kind, DILATTN_BACKEND_EMU, pool);
  const simt::RuntimeCalls planned = simt::runtime_calls();
  if (sparse)  // the mask goes to the device here, once
    CHECK_MSG(planned.sync_copies - at_plan.sync_copies == 3, "%llu copies at plan time",
              static_cast<unsigned long long>(planned.sync_copies - at_plan.sync_copies));
  cudaStream_t stream = nullptr;
  cudaStreamCreate(&stream);
  Tensors t;

  // Warm-up: the pool's block and the device's facts.
  CHECK_OK(
      dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0));
  cudaStreamSynchronize(stream);
  expect_reference(t, kind);

  {  // 1, 2, 3
    simt::ScopedDeferredStreams deferred;
    t.poison();
    const simt::RuntimeCalls before = simt::runtime_calls();
    const uint64_t on_stream = simt::launches_on(stream), on_legacy = simt::launches_on(nullptr);
    CHECK_OK(
        dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0));
    const simt::RuntimeCalls after = simt::runtime_calls();
    CHECK_MSG(t.poisoned(), "the outputs were written before the stream ran");
    CHECK_MSG(after.mallocs == before.mallocs, "cudaMalloc in a warm call");
    CHECK_MSG(after.device_syncs == before.device_syncs &&
                  after.stream_syncs == before.stream_syncs &&
                  after.event_syncs == before.event_syncs,
              "a host synchronisation in a call on a stream");
    CHECK_MSG(after.sync_copies == before.sync_copies, "%llu synchronous copies per call",
              static_cast<unsigned long long>(after.sync_copies - before.sync_copies));
    CHECK_MSG(after.device_properties == before.device_properties &&
                  after.func_attributes == before.func_attributes,
              "device properties asked per call (%llu)",
              static_cast<unsigned long long>(after.device_properties - before.device_properties));
    const uint64_t launches = after.launches - before.launches;
    CHECK_MSG(simt::launches_on(stream) - on_stream == launches &&
                  (workspace ? launches >= 5 : launches == 1) &&
                  simt::launches_on(nullptr) == on_legacy,
              "%llu of %llu launches on the caller's stream",
              static_cast<unsigned long long>(simt::launches_on(stream) - on_stream),
              static_cast<unsigned long long>(after.launches - before.launches));
    const size_t held = pool_in_use(pool);
    if (workspace)
      CHECK_MSG(held > 0, "the workspace went back to the pool before the stream ran");
    else
      CHECK_MSG(held == 0, "a one-branch call took %zu bytes of workspace", held);
    cudaStreamSynchronize(stream);
    expect_reference(t, kind);
    size_t arenas_before = 0, arenas_after = 0;
    pool_in_use(pool, &arenas_before);
    CHECK_OK(
        dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0));
    CHECK_MSG(pool_in_use(pool, &arenas_after) == held && arenas_after == arenas_before,
              "the next call did not reuse the block");
    cudaStreamSynchronize(stream);
  }

  {  // 4: an error after the first launch
    simt::ScopedDeferredStreams deferred;
    simt::fail_launch_after(workspace ? 1 : 0);
    const dilattn_status s =
        dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0);
    simt::fail_launch_after(-1);
    CHECK_MSG(s == DILATTN_ERROR_CUDA, "injected failure gave %s",
              dilattn_status_string(s));
    cudaGetLastError();
    if (workspace)
      CHECK_MSG(pool_in_use(pool) > 0,
                "an early error return gave the workspace back while a kernel was queued");
    cudaStreamSynchronize(stream);
  }

  {  // 5: capture
    std::vector<unsigned char> own(1 << 16);
    size_t need = 0;
    dilattn_plan_workspace_size(plan, &need, nullptr);
    CHECK_MSG(need <= own.size(), "workspace %zu", need);
    cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
    t.poison();
    if (workspace) {
      CHECK_ERROR(
          dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0),
          DILATTN_ERROR_INVALID_VALUE, "'workspace'");
      CHECK_MSG(t.poisoned(), "a refused call wrote the outputs");
    } else {
      CHECK_MSG(need == 0, "a one-branch plan needs %zu bytes of forward workspace", need);
      const uint64_t captured = simt::captured_on(stream);
      CHECK_OK(
          dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0));
      CHECK_MSG(simt::captured_on(stream) - captured == 1 && t.poisoned(),
                "a one-branch call without workspace was not captured whole");
    }
    CHECK_MSG(pool_in_use(pool) == 0, "the refused call's pool block was not given back");
    const simt::RuntimeCalls before = simt::runtime_calls();
    const uint64_t captured = simt::captured_on(stream);
    CHECK_OK(dilattn_forward_on_stream(plan, stream, &t.tq, &t.tk, &t.tv, &t.to, &t.tl,
                                       own.data(), own.size()));
    const simt::RuntimeCalls after = simt::runtime_calls();
    CHECK_MSG(after.mallocs == before.mallocs && after.stream_syncs == before.stream_syncs &&
                  after.device_syncs == before.device_syncs &&
                  after.sync_copies == before.sync_copies,
              "allocation or synchronisation while capturing");
    CHECK_MSG(simt::captured_on(stream) - captured == after.launches - before.launches &&
                  t.poisoned(),
              "work of a captured call ran, or went elsewhere than the stream");
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(stream, &graph);
  }

  {  // 6: the plain call
    t.poison();
    const simt::RuntimeCalls before = simt::runtime_calls();
    CHECK_OK(dilattn_forward(plan, &t.tq, &t.tk, &t.tv, &t.to, &t.tl, nullptr, 0));
    const simt::RuntimeCalls after = simt::runtime_calls();
    CHECK_MSG(after.stream_syncs - before.stream_syncs == 1, "plain call syncs %llu times",
              static_cast<unsigned long long>(after.stream_syncs - before.stream_syncs));
    expect_reference(t, kind);
    CHECK_MSG(pool_in_use(pool) == 0, "the plain call kept its block");
  }
  check_backward_on_stream(plan, stream, t, kind);
  cudaStreamDestroy(stream);
  dilattn_plan_destroy(plan);
  dilattn_pool_destroy(pool);
}

}  // namespace

int main() {
  // On cuda this test says it is emu-only and is not counted as run (test_backend.h).
  if (!harness::runs_only_on_emu(
          "kernels_launch_stream",
          "the emulator's deferred streams and runtime call counters"))
    return harness::kExitSkip;
  check_plan(Kind::dense);
  check_plan(Kind::sparse);
  check_plan(Kind::dilated);
  check_options_on_stream(Kind::dense);
  check_options_on_stream(Kind::dilated);
  return harness::finish("kernels_launch_stream");
}
