// test_ring_agreement.cpp - SPEC 5 and 7: the ranks of a ring call must pass the same call. Two
// ranks (threads transport) whose plans differ in one field that changes the result - the
// block-sparse mask's blocks only (same size and block count), its per-head layout, the scale,
// the segments, the dilations, the causal flag, the head mode - are both refused with
// DILATTN_ERROR_COMM naming the other rank and the field, and neither writes its outputs.
// Fields that do not change the result (the backend of one device type, the thread count) may
// differ: those calls succeed and give the single-device O. Also:
//   - one rank's communicator used by two calls at once (two threads): the second is refused
//     at once (INVALID_VALUE, "already in a ring call"), the first waits for rank 1 and times
//     out naming it (never blaming rank 1 for a call it did not make);
//   - a misaligned shard and an output shard whose rows share memory fail every rank (that
//     rank INVALID_VALUE naming the tensor, the other COMM naming that rank);
//   - forward and backward called on two ranks at once are refused as another direction.
// The SPEC 10 and 11 options and the call's values are fields too: the window, the softcap,
// the ALiBi slopes, sinks (the plan's flag and the call's values), dropout p, and the call's
// dropout seed and offset (dilattn_ring_forward_ex / _backward_ex).
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../common/check.h"
#include "dilattn.h"
#include "dilattn_mask.h"
#include "dilattn_ring.h"

using namespace harness;

namespace {

constexpr int64_t N = 32, H = 2, Hkv = 1, D = 4, kRows = N / 2, kBlock = 8;
constexpr float kPoison = -77.0f;

// What one rank's plan is made of.
struct PlanFields {
  enum class Kind { dense, dilated, sparse } kind = Kind::dense;
  std::vector<int64_t> block_cols = {0, 1, 2, 3};  // sparse: the key block of each row block
  bool per_head_mask = false;  // sparse: the same blocks given once per head
  double scale = 0;            // 0: the default 1/sqrt(D)
  std::vector<int64_t> segments = {16, 32}, dilations = {1, 2};
  dilattn_head_mode head_mode = DILATTN_HEADS_MOD;
  bool causal = false;
  dilattn_backend backend = DILATTN_BACKEND_REF;
  int32_t threads = 0;
  // SPEC 10.1, 10.3, 11: the plan's options, and the call's sink values, seed and offset.
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> slopes;
  bool sinks = false;
  double dropout_p = 0;
  std::vector<double> sink_values = {0.5, -1.0};
  uint64_t seed = 7, offset = 0;

  dilattn_call_options options() const {
    dilattn_call_options o = dilattn_call_options_make();
    o.dropout_seed = seed;
    o.dropout_offset = offset;
    o.sinks = sinks ? sink_values.data() : nullptr;
    return o;
  }
};

dilattn_plan make_plan(const PlanFields& f) {
  dilattn_desc desc = nullptr;
  CHECK_OK(dilattn_desc_create(&desc));
  if (f.kind == PlanFields::Kind::dilated)
    CHECK_OK(dilattn_desc_set_dilated(desc, static_cast<int32_t>(f.segments.size()),
                                      f.segments.data(), f.dilations.data(), f.head_mode));
  if (f.kind == PlanFields::Kind::sparse) {
    const int64_t blocks = N / kBlock, heads = f.per_head_mask ? H : 1;
    std::vector<int64_t> row_ptr, col_idx, head_ptr = {0};
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t i = 0; i <= blocks; ++i) row_ptr.push_back(i);
      col_idx.insert(col_idx.end(), f.block_cols.begin(), f.block_cols.end());
      head_ptr.push_back(static_cast<int64_t>(col_idx.size()));
    }
    dilattn_bsr_view view{};
    view.struct_size = sizeof view;
    view.seqlen_q = view.seqlen_k = N;
    view.block_q = view.block_k = kBlock;
    view.num_heads = heads;
    view.index_type = DILATTN_INDEX_INT64;
    view.row_ptr = row_ptr.data();
    view.col_idx = col_idx.data();
    view.head_ptr = f.per_head_mask ? head_ptr.data() : nullptr;
    dilattn_mask mask = nullptr;
    CHECK_OK(dilattn_mask_create(&mask, &view));
    CHECK_OK(dilattn_desc_set_block_sparse(desc, mask));
    dilattn_mask_destroy(mask);
  }
  if (f.scale != 0) CHECK_OK(dilattn_desc_set_scale(desc, f.scale));
  if (f.causal) CHECK_OK(dilattn_desc_set_causal(desc, 1));
  if (f.threads != 0) CHECK_OK(dilattn_desc_set_num_threads(desc, f.threads));
  if (f.window_left != -1 || f.window_right != -1)
    CHECK_OK(dilattn_desc_set_window(desc, f.window_left, f.window_right));
  if (f.softcap != 0) CHECK_OK(dilattn_desc_set_softcap(desc, f.softcap));
  if (!f.slopes.empty())
    CHECK_OK(dilattn_desc_set_alibi(desc, f.slopes.data(), static_cast<int64_t>(f.slopes.size())));
  if (f.sinks) CHECK_OK(dilattn_desc_set_sinks(desc, 1));
  if (f.dropout_p != 0) CHECK_OK(dilattn_desc_set_dropout(desc, f.dropout_p));
  const dilattn_shape shape = dilattn_shape_make(1, N, N, H, Hkv, D);
  dilattn_plan plan = nullptr;
  CHECK_OK(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, f.backend));
  dilattn_desc_destroy(desc);
  return plan;
}

float value(int64_t i, double phase) { return static_cast<float>(std::sin(0.37 * double(i) + phase)); }

// The full tensors, and one rank's contiguous shard of them (rows [rank * kRows, + kRows)).
struct Full {
  std::vector<float> q, k, v, d_o;
  Full() : q(N * H * D), k(N * Hkv * D), v(k.size()), d_o(q.size()) {
    for (size_t i = 0; i < q.size(); ++i) q[i] = value(int64_t(i), 0.0), d_o[i] = value(int64_t(i), 2.0);
    for (size_t i = 0; i < k.size(); ++i) k[i] = value(int64_t(i), 0.5), v[i] = value(int64_t(i), 1.0);
  }
};

struct Shard {
  std::vector<float> q, k, v, d_o, o, lse, dq, dk, dv;
  dilattn_tensor tq, tk, tv, tdo, to, tl, tdq, tdk, tdv;
  Shard(const Full& f, int32_t rank) {
    auto rows = [&](const std::vector<float>& x, int64_t heads) {
      const size_t row = static_cast<size_t>(heads * D), first = static_cast<size_t>(rank * kRows);
      return std::vector<float>(x.begin() + first * row, x.begin() + (first + kRows) * row);
    };
    q = rows(f.q, H); k = rows(f.k, Hkv); v = rows(f.v, Hkv); d_o = rows(f.d_o, H);
    o.assign(q.size(), kPoison); lse.assign(static_cast<size_t>(H * kRows), kPoison);
    dq.assign(q.size(), kPoison); dk.assign(k.size(), kPoison); dv.assign(k.size(), kPoison);
    tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, 1, kRows, H, D);
    tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, 1, kRows, Hkv, D);
    tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, 1, kRows, Hkv, D);
    tdo = dilattn_tensor_contiguous(d_o.data(), DILATTN_F32, 1, kRows, H, D);
    to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, 1, kRows, H, D);
    tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, 1, H, kRows, 1);
    tdq = dilattn_tensor_contiguous(dq.data(), DILATTN_F32, 1, kRows, H, D);
    tdk = dilattn_tensor_contiguous(dk.data(), DILATTN_F32, 1, kRows, Hkv, D);
    tdv = dilattn_tensor_contiguous(dv.data(), DILATTN_F32, 1, kRows, Hkv, D);
  }
  static bool poisoned(const std::vector<float>& x) {
    for (float f : x)
      if (f != kPoison) return false;
    return true;
  }
  bool untouched() const {
    return poisoned(o) && poisoned(lse) && poisoned(dq) && poisoned(dk) && poisoned(dv);
  }
  dilattn_status forward(dilattn_plan plan, dilattn_comm comm) {
    return dilattn_ring_forward(plan, comm, DILATTN_RING_CONTIGUOUS, &tq, &tk, &tv, &to, &tl);
  }
  // dO, O and LSE as inputs: O and LSE need not be the forward's for a refused call.
  dilattn_status backward(dilattn_plan plan, dilattn_comm comm) {
    return dilattn_ring_backward(plan, comm, DILATTN_RING_CONTIGUOUS, &tq, &tk, &tv, &to, &tl,
                                 &tdo, &tdq, &tdk, &tdv);
  }
  // The _ex calls with the call options of f (SPEC 10.3, 11.2).
  dilattn_status forward_ex(dilattn_plan plan, dilattn_comm comm, const PlanFields& f) {
    const dilattn_call_options o = f.options();
    return dilattn_ring_forward_ex(plan, comm, DILATTN_RING_CONTIGUOUS, &tq, &tk, &tv, &to, &tl,
                                   &o);
  }
  dilattn_status backward_ex(dilattn_plan plan, dilattn_comm comm, const PlanFields& f) {
    const dilattn_call_options o = f.options();
    return dilattn_ring_backward_ex(plan, comm, DILATTN_RING_CONTIGUOUS, &tq, &tk, &tv, &to,
                                    &tl, &tdo, &tdq, &tdk, &tdv, &o);
  }
};

struct RankResult {
  dilattn_status status = DILATTN_ERROR_COMM;
  std::string message;
  bool untouched = false;
  std::vector<float> o;
};

// Two ranks on threads, each calling body(rank, comm, shard).
std::vector<RankResult> run_two_ranks(
    const std::function<dilattn_status(int32_t, dilattn_comm, Shard&)>& body,
    int32_t timeout_ms = 20000) {
  const Full full;
  dilattn_comm comms[2] = {nullptr, nullptr};
  std::vector<RankResult> result(2);
  if (!CHECK_OK(dilattn_comm_create_threads(2, timeout_ms, comms))) return result;
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      Shard shard(full, r);
      RankResult& mine = result[static_cast<size_t>(r)];
      mine.status = body(r, comms[r], shard);
      mine.message = dilattn_last_error();
      mine.untouched = shard.untouched();
      mine.o = shard.o;
    });
  for (std::thread& t : threads) t.join();
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  return result;
}

bool names(const std::string& message, const std::string& needle) {
  return message.find(needle) != std::string::npos;
}

// Rank 0 with plan a, rank 1 with plan b: both COMM naming the other rank and `field`.
void disagreeing_ranks_refused(const char* what, const PlanFields& a, const PlanFields& b,
                               const char* field, bool backward) {
  CaseScope scope(std::string(what) + (backward ? " (backward)" : " (forward)"));
  dilattn_plan plans[2] = {make_plan(a), make_plan(b)};
  if (plans[0] == nullptr || plans[1] == nullptr) return;
  const PlanFields* fields[2] = {&a, &b};
  const auto result = run_two_ranks([&](int32_t r, dilattn_comm comm, Shard& s) {
    return backward ? s.backward_ex(plans[r], comm, *fields[r])
                    : s.forward_ex(plans[r], comm, *fields[r]);
  });
  for (int32_t r = 0; r < 2; ++r) {
    const RankResult& got = result[static_cast<size_t>(r)];
    const std::string other = "rank " + std::to_string(1 - r) + " called with another";
    CHECK_MSG(got.status == DILATTN_ERROR_COMM && names(got.message, other) &&
                  names(got.message, field),
              "rank %d: %s (%s), want DILATTN_ERROR_COMM naming \"%s\" and \"%s\"", r,
              dilattn_status_string(got.status), got.message.c_str(), other.c_str(), field);
    CHECK_MSG(got.untouched, "rank %d wrote its outputs", r);
  }
  for (dilattn_plan p : plans) dilattn_plan_destroy(p);
}

// Fields that do not change the result may differ: the call succeeds on both ranks and each
// rank's O is the single-device O of its rows (SPEC 8, f32).
void harmless_differences_accepted() {
  CaseScope scope("backend and threads may differ");
  PlanFields a, b;
  a.kind = b.kind = PlanFields::Kind::dilated;
  a.causal = b.causal = true;
  b.backend = DILATTN_BACKEND_CPU;
  b.threads = 2;
  dilattn_plan plans[2] = {make_plan(a), make_plan(b)};
  dilattn_plan whole = make_plan(a);
  if (plans[0] == nullptr || plans[1] == nullptr || whole == nullptr) return;
  const auto result = run_two_ranks([&](int32_t r, dilattn_comm comm, Shard& s) {
    return s.forward(plans[r], comm);
  });
  const Full full;
  std::vector<float> o(full.q.size());
  dilattn_tensor tq = dilattn_tensor_contiguous(const_cast<float*>(full.q.data()), DILATTN_F32, 1, N, H, D);
  dilattn_tensor tk = dilattn_tensor_contiguous(const_cast<float*>(full.k.data()), DILATTN_F32, 1, N, Hkv, D);
  dilattn_tensor tv = dilattn_tensor_contiguous(const_cast<float*>(full.v.data()), DILATTN_F32, 1, N, Hkv, D);
  dilattn_tensor to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, 1, N, H, D);
  CHECK_OK(dilattn_forward(whole, &tq, &tk, &tv, &to, nullptr, nullptr, 0));
  for (int32_t r = 0; r < 2; ++r) {
    const RankResult& got = result[static_cast<size_t>(r)];
    if (!CHECK_MSG(got.status == DILATTN_SUCCESS, "rank %d: %s (%s)", r,
                   dilattn_status_string(got.status), got.message.c_str()))
      continue;
    double worst = 0;
    for (size_t i = 0; i < got.o.size(); ++i) {
      const double want = o[static_cast<size_t>(r * kRows * H * D) + i];
      worst = std::fmax(worst, std::fabs(got.o[i] - want) - 1e-4 * std::fabs(want));
    }
    CHECK_MSG(worst <= 1e-5, "rank %d: O off the single-device O by %g beyond SPEC 8", r, worst);
  }
  for (dilattn_plan p : plans) dilattn_plan_destroy(p);
  dilattn_plan_destroy(whole);
}

// Rank 0's communicator used by two threads at once; rank 1 never calls. One call is refused
// at once, the other times out waiting for rank 1 and says so.
void one_comm_from_two_threads() {
  CaseScope scope("one comm from two threads");
  PlanFields f;
  dilattn_plan plan = make_plan(f);
  if (plan == nullptr) return;
  const Full full;
  dilattn_comm comms[2] = {nullptr, nullptr};
  if (!CHECK_OK(dilattn_comm_create_threads(2, 1500, comms))) return;
  RankResult result[2];
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t)
    threads.emplace_back([&, t] {
      Shard shard(full, 0);
      result[t].status = shard.forward(plan, comms[0]);
      result[t].message = dilattn_last_error();
      result[t].untouched = shard.untouched();
    });
  for (std::thread& t : threads) t.join();
  int refused = 0, timed_out = 0;
  for (const RankResult& got : result) {
    CHECK_MSG(!names(got.message, "called with another"),
              "a call blames a rank that never called: %s", got.message.c_str());
    if (got.status == DILATTN_ERROR_INVALID_VALUE && names(got.message, "'comm'") &&
        names(got.message, "already in a ring call"))
      ++refused;
    if (got.status == DILATTN_ERROR_COMM && names(got.message, "rank(s) 1")) ++timed_out;
    CHECK_MSG(got.untouched, "a call wrote its outputs");
  }
  CHECK_MSG(refused == 1 && timed_out == 1,
            "want one call refused as already in a ring call and one timed out waiting for rank "
            "1; got \"%s\" (%s) and \"%s\" (%s)",
            result[0].message.c_str(), dilattn_status_string(result[0].status),
            result[1].message.c_str(), dilattn_status_string(result[1].status));
  for (dilattn_comm c : comms) dilattn_comm_destroy(c);
  dilattn_plan_destroy(plan);
}

// A bad shard on one rank fails both: that rank names its tensor, the other names that rank.
void bad_shard_fails_every_rank(const char* what, const char* tensor,
                                const std::function<void(Shard&)>& spoil, bool backward) {
  CaseScope scope(what);
  dilattn_plan plan = make_plan(PlanFields{});
  if (plan == nullptr) return;
  const auto result = run_two_ranks([&](int32_t r, dilattn_comm comm, Shard& s) {
    if (r == 1) spoil(s);
    return backward ? s.backward(plan, comm) : s.forward(plan, comm);
  });
  CHECK_MSG(result[1].status == DILATTN_ERROR_INVALID_VALUE && names(result[1].message, tensor),
            "rank 1: %s (%s), want INVALID_VALUE naming %s", dilattn_status_string(result[1].status),
            result[1].message.c_str(), tensor);
  CHECK_MSG(result[0].status == DILATTN_ERROR_COMM && names(result[0].message, "rank 1 failed") &&
                names(result[0].message, tensor),
            "rank 0: %s (%s), want COMM naming rank 1 and %s",
            dilattn_status_string(result[0].status), result[0].message.c_str(), tensor);
  for (int r = 0; r < 2; ++r) CHECK_MSG(result[r].untouched, "rank %d wrote its outputs", r);
  dilattn_plan_destroy(plan);
}

// Rank 0 runs the forward, rank 1 the backward of the same plan.
void forward_against_backward() {
  CaseScope scope("forward on one rank, backward on the other");
  dilattn_plan plan = make_plan(PlanFields{});
  if (plan == nullptr) return;
  const auto result = run_two_ranks([&](int32_t r, dilattn_comm comm, Shard& s) {
    return r == 0 ? s.forward(plan, comm) : s.backward(plan, comm);
  });
  for (int r = 0; r < 2; ++r) {
    CHECK_MSG(result[r].status == DILATTN_ERROR_COMM && names(result[r].message, "direction"),
              "rank %d: %s (%s)", r, dilattn_status_string(result[r].status),
              result[r].message.c_str());
    CHECK_MSG(result[r].untouched, "rank %d wrote its outputs", r);
  }
  dilattn_plan_destroy(plan);
}

}  // namespace

int main() {
  using Kind = PlanFields::Kind;
  for (bool backward : {false, true}) {
    PlanFields diagonal, swapped;
    diagonal.kind = swapped.kind = Kind::sparse;
    swapped.block_cols = {1, 0, 3, 2};  // as many blocks, other columns
    disagreeing_ranks_refused("mask blocks differ", diagonal, swapped, "block-sparse mask",
                              backward);
    PlanFields per_head = diagonal;
    per_head.per_head_mask = true;  // the same blocks, given once per head
    disagreeing_ranks_refused("mask per-head layout differs", diagonal, per_head,
                              "block-sparse mask", backward);

    PlanFields a, b;
    b.scale = 0.25;
    disagreeing_ranks_refused("scale differs", a, b, "scale", backward);

    PlanFields d1, d2;
    d1.kind = d2.kind = Kind::dilated;
    d2.segments = {8, 32};
    disagreeing_ranks_refused("segments differ", d1, d2, "segments and dilations", backward);
    d2 = d1;
    d2.dilations = {1, 4};
    disagreeing_ranks_refused("dilations differ", d1, d2, "segments and dilations", backward);
    d2 = d1;
    d2.head_mode = DILATTN_HEADS_BLOCK;
    disagreeing_ranks_refused("head mode differs", d1, d2, "head mode", backward);
    d2 = d1;
    d2.causal = true;
    disagreeing_ranks_refused("causal differs", d1, d2, "causal", backward);

    // SPEC 10 and 11: the options, and the call's values, each named.
    PlanFields o1, o2;
    o1.window_left = o2.window_left = 5;
    o2.window_right = 3;
    disagreeing_ranks_refused("window differs", o1, o2, "window (left, right)", backward);
    o1 = o2 = PlanFields{};
    o2.softcap = 4;
    disagreeing_ranks_refused("softcap differs", o1, o2, "softcap", backward);
    o1.slopes = {0.5, 0.25};
    o2 = o1;
    o2.slopes[1] = 0.125;
    disagreeing_ranks_refused("ALiBi slopes differ", o1, o2, "ALiBi slopes", backward);
    o1 = o2 = PlanFields{};
    o1.sinks = o2.sinks = true;
    o2.sink_values[1] = -2.0;
    disagreeing_ranks_refused("sink values differ", o1, o2, "sinks", backward);
    o1 = o2 = PlanFields{};
    o2.sinks = true;
    // Rank 1 has sinks and rank 0 none: rank 0's call carries no sinks, so the plans differ.
    disagreeing_ranks_refused("sinks on one rank only", o1, o2, "sinks", backward);
    o1 = o2 = PlanFields{};
    o1.dropout_p = 0.25;
    o2.dropout_p = 0.5;
    disagreeing_ranks_refused("dropout p differs", o1, o2, "dropout p", backward);
    o2 = o1;
    o2.seed = 8;
    disagreeing_ranks_refused("dropout seed differs", o1, o2, "dropout seed or offset", backward);
    o2 = o1;
    o2.offset = 1;
    disagreeing_ranks_refused("dropout offset differs", o1, o2, "dropout seed or offset",
                              backward);
  }
  harmless_differences_accepted();
  one_comm_from_two_threads();
  bad_shard_fails_every_rank("misaligned q shard", "'q'", [](Shard& s) {
    s.tq.data = reinterpret_cast<unsigned char*>(s.q.data()) + 2;
  }, false);
  bad_shard_fails_every_rank("o shard rows sharing memory", "'o'", [](Shard& s) {
    s.to.strides[1] = 0;
  }, false);
  bad_shard_fails_every_rank("dk shard rows sharing memory", "'dk'", [](Shard& s) {
    s.tdk.strides[1] = 0;
  }, true);
  forward_against_backward();
  return finish("ring_ranks_must_agree");
}
