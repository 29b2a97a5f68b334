// cpu_bench.cpp - the cpu backend's benchmark: forward and backward seconds (median of repeats),
// useful GFLOP/s, peak RSS, against an FMA-peak microbenchmark run in the same process, so
// efficiency is a ratio. Prints a table for people and writes JSON (--json FILE) for scripts;
// both name the machine (CPU model, cores, flags, build flags).
//
// Useful FLOPs: 4 D per (query, key) pair of A(i) (S = QK^T and O += PV, 2 D each), counted
// exactly from the index rules (a causal segment of n selected rows has n(n+1)/2 pairs);
// backward is counted as 2.5x the forward's. Cases (--quick shrinks every N for a smoke run):
//   main:   dilated-attention-pytorch's main configuration: B=1, N=8192, H=8, D=64,
//           segments 2048, 4096, 8192, dilations 1, 2, 4, head mode groups
//   sweep:  the same branches at N = 8K .. 256K (time per token should stay flat)
//   dense:  N = 4096, H=8, D=64, with and without causal
//   small:  a decode step (Nq = 1, Nk = 4096) and dense N = 256: per-call overhead (threads)
//   long:   N = 1,048,576, H=8, D=64, forward only: peak RSS against the bytes of Q,K,V,O,LSE
//   window: a sliding window (4096, 0) on N = 65536, against dense causal N = 8192 (both about
//           4096 keys per row): a window costs in proportion to the pairs it keeps (SPEC 10.1)
//   packed: 64 causal documents of 128 .. 4096 tokens (deterministic lengths) in one packed
//           batch (SPEC 10.2), against the same documents run one by one (one plan each)
// Each case runs in a child process (this program with --case), so peak RSS is the case's own.
//   dropout: main and dense (causal too) again with attention dropout p = 0.1 (SPEC 11, the
//           _ex calls with a seed); each repeat also runs the call without dropout, and the
//           "dropout cost" lines compare the least CPU-seconds of the two
// Each case runs in a child process (this program with --case), so peak RSS is the case's own.
// Run: cpu_bench [--quick] [--repeats R] [--json out.json] [--only NAME[,NAME...]]
//                [--dtype f32|bf16|both]
//      (--only: the cases whose names contain one of the NAMEs; --dtype: the inputs' dtype,
//      f32 by default; both: every case in f32, then again in bf16 (names ending "_bf16"), and
//      a table of bf16's speed over f32's per case. The LSE is f32 either way. With
//      DILATTN_CPU_ISA the instruction set, e.g. avx512bf16 against avx512.)
//      cpu_bench --peak: the FMA peak alone (and the bf16 pair-product peak where the library
//      chose avx512bf16, else 0), one JSON line (bench/cpu/torch_sdpa_compare.py)
// (repeats default 5, 2 with --quick; at most 2 for N >= 65536 and 1 for the 1M case).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "dilattn.h"

namespace {

struct BenchCase {
  std::string name;
  int64_t B = 1, N = 0, H = 8, D = 64;
  int64_t Nq = 0;  // query rows when not N (dense only: the decode case)
  bool dilated = true, causal = false, backward = true;
  double dropout_p = 0;  // SPEC 11: > 0 runs dilattn_forward_ex / dilattn_backward_ex
  std::vector<int64_t> segments{2048, 4096, 8192}, dilations{1, 2, 4};
  int64_t window_left = -1, window_right = -1;  // SPEC 10.1; -1: unbounded
  std::vector<int64_t> docs;  // packed documents' lengths (B = 1, N = their sum), SPEC 10.2
  bool one_by_one = false;    // the documents as separate calls, one plan each
  dilattn_dtype dtype = DILATTN_F32;  // Q, K, V, O, dO, dQ, dK, dV (f32 or bf16)
};

// f32 to bf16, round to nearest even (NaN stays NaN), as the library rounds (SPEC 1).
uint16_t to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// A tensor's elements in the case's dtype, f32 or bf16.
struct Storage {
  dilattn_dtype dtype;
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
  Storage(dilattn_dtype t, size_t n) : dtype(t) {
    if (t == DILATTN_BF16) bf16.resize(n); else f32.resize(n);
  }
  void set(size_t i, float x) {
    if (dtype == DILATTN_BF16) bf16[i] = to_bf16(x); else f32[i] = x;
  }
  void* at(int64_t element) {
    if (dtype == DILATTN_BF16) return bf16.data() + element;
    return f32.data() + element;
  }
};

struct Result {
  double fwd_s = 0, bwd_s = 0, pairs = 0;
  double fwd_cpu_s = 0;  // process CPU seconds of one forward (median): robust on a busy machine
  double bwd_cpu_s = 0;  // the same for one backward
  // Dropout rows: the least CPU-seconds of one call with dropout and of the same call without
  // it on a second plan, the two run in turn in every repeat (forward, backward), so load that
  // comes and goes on the machine falls on both alike.
  double paired_fwd_cpu_s = 0, paired_base_fwd_cpu_s = 0;
  double paired_bwd_cpu_s = 0, paired_base_bwd_cpu_s = 0;
  long peak_rss = 0;  // bytes
  double tensor_bytes = 0;  // Q, K, V, O, LSE
};

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double cpu_seconds_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

long peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::atol(line.c_str() + 6) * 1024;
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss * 1024;
}

void check(dilattn_status s, const char* what) {
  if (s != DILATTN_SUCCESS) {
    std::fprintf(stderr, "cpu_bench: %s failed: %s (%s)\n", what, dilattn_status_string(s),
                 dilattn_last_error());
    std::exit(2);
  }
}

// Runs one case in this process: forward repeats, then backward repeats.
Result run_case(const BenchCase& c, int repeats) {
  Result res;
  const int64_t Nq = c.Nq > 0 ? c.Nq : c.N;
  const size_t n_elem = static_cast<size_t>(c.B * c.N * c.H * c.D);
  const size_t n_q = static_cast<size_t>(c.B * Nq * c.H * c.D);
  const size_t n_lse = static_cast<size_t>(c.B * c.H * Nq);
  const double element_bytes = c.dtype == DILATTN_BF16 ? 2.0 : 4.0;
  res.tensor_bytes = element_bytes * (2 * n_q + 2 * n_elem) + 4.0 * n_lse;
  Storage q(c.dtype, n_q), k(c.dtype, n_elem), v(c.dtype, n_elem), o(c.dtype, n_q);
  std::vector<float> lse(n_lse);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (size_t x = 0; x < n_elem; ++x) { k.set(x, u(rng)); v.set(x, u(rng)); }
  for (size_t x = 0; x < n_q; ++x) q.set(x, u(rng));
  auto view = [&](Storage& t, int64_t rows) {
    return dilattn_tensor_contiguous(t.at(0), c.dtype, c.B, rows, c.H, c.D);
  };
  dilattn_tensor tq = view(q, Nq), tk = view(k, c.N), tv = view(v, c.N), to = view(o, Nq);
  dilattn_tensor tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, c.B, c.H, Nq, 1);

  // The calls one repeat makes: one plan over everything, or one per document (one_by_one).
  struct Call {
    dilattn_desc desc = nullptr;
    dilattn_plan plan = nullptr;
    int64_t first = 0, rows = 0;  // the call's rows of the (packed) tensors
    std::vector<float> lse;       // its own LSE [B, H, rows]
    dilattn_plan base = nullptr;  // dropout rows: the same call without dropout (Result)
  };
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_seed = 0x5EED;
  options.dropout_offset = 1;
  const dilattn_call_options* opts = c.dropout_p > 0 ? &options : nullptr;
  auto least = [](double a, double b) { return a == 0 || b < a ? b : a; };
  std::vector<int64_t> cu{0};
  for (int64_t n : c.docs) cu.push_back(cu.back() + n);
  std::vector<Call> calls(c.one_by_one ? c.docs.size() : 1);
  size_t ws_bytes = 0;
  for (size_t x = 0; x < calls.size(); ++x) {
    Call& call = calls[x];
    call.first = c.one_by_one ? cu[x] : 0;
    call.rows = c.one_by_one ? c.docs[x] : Nq;
    dilattn_desc desc;
    check(dilattn_desc_create(&desc), "desc_create");
    call.desc = desc;
    if (c.dilated)
      check(dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.segments.size()),
                                     c.segments.data(), c.dilations.data(), DILATTN_HEADS_GROUPS),
            "set_dilated");
    check(dilattn_desc_set_causal(desc, c.causal), "set_causal");
    if (c.window_left >= 0 || c.window_right >= 0)
      check(dilattn_desc_set_window(desc, c.window_left, c.window_right), "set_window");
    if (c.dropout_p > 0) check(dilattn_desc_set_dropout(desc, c.dropout_p), "set_dropout");
    if (!c.docs.empty() && !c.one_by_one)
      check(dilattn_desc_set_varlen(desc, static_cast<int64_t>(c.docs.size()), cu.data(),
                                    cu.data()), "set_varlen");
    const int64_t keys = c.one_by_one ? call.rows : c.N;
    const dilattn_shape shape = dilattn_shape_make(c.B, call.rows, keys, c.H, c.H, c.D);
    check(dilattn_plan_create(&call.plan, desc, &shape, c.dtype, DILATTN_BACKEND_CPU),
          "plan_create");
    if (opts != nullptr) {
      check(dilattn_desc_set_dropout(desc, 0.0), "set_dropout");
      check(dilattn_plan_create(&call.base, desc, &shape, c.dtype, DILATTN_BACKEND_CPU),
            "plan_create");
    }
    int64_t score_terms = 0;  // the (query, key) pairs of every A(i), from the library's rules
    check(dilattn_plan_score_count(call.plan, &score_terms), "plan_score_count");
    res.pairs += static_cast<double>(score_terms);
    size_t fwd_ws = 0, bwd_ws = 0;
    check(dilattn_plan_workspace_size(call.plan, &fwd_ws, &bwd_ws), "workspace_size");
    ws_bytes = std::max(ws_bytes, std::max(fwd_ws, c.backward ? bwd_ws : 0));
    call.lse.resize(static_cast<size_t>(c.B * c.H * call.rows));
  }
  std::vector<unsigned char> ws(ws_bytes);
  // A call's rows of a [B, rows, H, D] tensor (B = 1 wherever there are several calls).
  auto rows_of = [&](Storage& t, const Call& call) {
    return dilattn_tensor_contiguous(t.at(call.first * c.H * c.D), c.dtype, c.B, call.rows, c.H,
                                     c.D);
  };

  std::vector<double> times, cpu_times;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    if (opts != nullptr) {  // dropout rows: one plan (no documents), its call without dropout
      const double c0 = cpu_seconds_now();
      check(dilattn_forward(calls[0].base, &tq, &tk, &tv, &to, &tl, ws.data(), ws.size()),
            "forward");
      if (rep > 0)
        res.paired_base_fwd_cpu_s = least(res.paired_base_fwd_cpu_s, cpu_seconds_now() - c0);
    }
    const double t0 = seconds_now(), c0 = cpu_seconds_now();
    for (Call& call : calls) {
      const dilattn_tensor cq = rows_of(q, call), ck = rows_of(k, call), cv = rows_of(v, call);
      const dilattn_tensor co = rows_of(o, call);
      const dilattn_tensor cl =
          dilattn_tensor_contiguous(call.lse.data(), DILATTN_F32, c.B, c.H, call.rows, 1);
      check(dilattn_forward_ex(call.plan, calls.size() > 1 ? &cq : &tq,
                               calls.size() > 1 ? &ck : &tk, calls.size() > 1 ? &cv : &tv,
                               calls.size() > 1 ? &co : &to, calls.size() > 1 ? &cl : &tl, opts,
                               ws.data(), ws.size()),
            "forward");
    }
    if (rep > 0) times.push_back(seconds_now() - t0);
    if (rep > 0) cpu_times.push_back(cpu_seconds_now() - c0);
    if (rep > 0 && opts != nullptr)
      res.paired_fwd_cpu_s = least(res.paired_fwd_cpu_s, cpu_times.back());
  }
  res.fwd_s = median(times);
  res.fwd_cpu_s = median(cpu_times);
  if (c.backward) {
    Storage d_o(c.dtype, n_q), dq(c.dtype, n_q), dk(c.dtype, n_elem), dv(c.dtype, n_elem);
    for (size_t x = 0; x < n_q; ++x) d_o.set(x, u(rng));
    dilattn_tensor tdo = view(d_o, Nq), tdq = view(dq, Nq), tdk = view(dk, c.N),
                   tdv = view(dv, c.N);
    times.clear();
    cpu_times.clear();
    for (int rep = 0; rep <= repeats; ++rep) {
      if (opts != nullptr) {  // dropout rows: one plan (no documents), its call without dropout
        const double c0 = cpu_seconds_now();
        check(dilattn_backward(calls[0].base, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                               ws.data(), ws.size()), "backward");
        if (rep > 0)
          res.paired_base_bwd_cpu_s = least(res.paired_base_bwd_cpu_s, cpu_seconds_now() - c0);
      }
      const double t0 = seconds_now(), c0 = cpu_seconds_now();
      for (Call& call : calls) {
        if (calls.size() == 1) {
          check(dilattn_backward_ex(call.plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                                    opts, ws.data(), ws.size()), "backward");
          continue;
        }
        const dilattn_tensor cq = rows_of(q, call), ck = rows_of(k, call), cv = rows_of(v, call);
        const dilattn_tensor co = rows_of(o, call), cdo = rows_of(d_o, call);
        const dilattn_tensor cdq = rows_of(dq, call), cdk = rows_of(dk, call),
                             cdv = rows_of(dv, call);
        const dilattn_tensor cl =
            dilattn_tensor_contiguous(call.lse.data(), DILATTN_F32, c.B, c.H, call.rows, 1);
        check(dilattn_backward(call.plan, &cq, &ck, &cv, &co, &cl, &cdo, &cdq, &cdk, &cdv,
                               ws.data(), ws.size()), "backward");
      }
      if (rep > 0) times.push_back(seconds_now() - t0);
      if (rep > 0) cpu_times.push_back(cpu_seconds_now() - c0);
      if (rep > 0 && opts != nullptr)
        res.paired_bwd_cpu_s = least(res.paired_bwd_cpu_s, cpu_times.back());
    }
    res.bwd_s = median(times);
    res.bwd_cpu_s = median(cpu_times);
  }
  for (Call& call : calls) {
    dilattn_plan_destroy(call.plan);
    dilattn_plan_destroy(call.base);
    dilattn_desc_destroy(call.desc);
  }
  res.peak_rss = peak_rss_bytes();
  return res;
}

// ---------------------------------------------------------------- FMA peak
// kChains independent FMA chains per thread (enough to hide FMA latency), with the vector
// width and the multiply-add the attention micro-kernel uses for the ISA the library chose
// (dilattn_cpu_isa(): avx512 and avx2 fused, sse a multiply and an add, as cpu_microkernel.h);
// all threads at once. GFLOP/s = 2 per lane per multiply-add. Also the rate per CPU-second
// (*per_cpu_s), which a busy machine disturbs less than wall time.
constexpr int kChains = 12;
constexpr long kLaneSteps = 20'000'000L;  // multiply-adds per lane and chain, over all widths

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) float peak_loop_avx512() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * c);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (long i = 0; i < kLaneSteps / 16; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, acc[0]);
  return lanes[0];
}

__attribute__((target("avx2,fma"))) float peak_loop_avx2() {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + 1e-3f * c);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (long i = 0; i < kLaneSteps / 8; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  for (int c = 1; c < kChains; ++c) acc[0] = _mm256_add_ps(acc[0], acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, acc[0]);
  return lanes[0];
}

// The bf16 pair-product peak: kChains chains of vdpbf16ps, each instruction 16 lanes of two
// bf16 products added to an f32 lane (32 multiply-adds), the instruction the avx512bf16 kernels
// multiply with (cpu/cpu_pair_dot.h). Run only where the library chose avx512bf16.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) float peak_loop_bf16_pairs() {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + 1e-3f * c);
  // bf16 words of 0.99609375 (0x3F7F) and 2^-30 (0x3080): the sums stay finite and normal.
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3F7F), b = (__m512bh)_mm512_set1_epi16(0x3080);
  for (long i = 0; i < kLaneSteps / 32; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  for (int c = 1; c < kChains; ++c) acc[0] = _mm512_add_ps(acc[0], acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, acc[0]);
  return lanes[0];
}
#endif

float peak_loop_sse() {  // 4 lanes, multiply then add (GCC vector extension: SSE2, NEON)
  typedef float v4 __attribute__((vector_size(16)));
  v4 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = v4{} + (1.0f + 1e-3f * c);
  const v4 a = v4{} + 0.999999f, b = v4{} + 1e-7f;
  for (long i = 0; i < kLaneSteps / 4; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  for (int c = 1; c < kChains; ++c) acc[0] += acc[c];
  return acc[0][0];
}

// GFLOP/s of `loop` on `threads` threads at once, best of 3, `lanes` multiply-adds per lane
// step (kLaneSteps / lanes instructions per chain).
double loop_gflops(float (*loop)(), int lanes, int threads, double* per_cpu_s) {
  std::vector<double> sink(static_cast<size_t>(threads));
  auto body = [&](int t) { sink[static_cast<size_t>(t)] = loop(); };  // keeps the loop alive
  double best = 0;
  *per_cpu_s = 0;
  for (int rep = 0; rep < 3; ++rep) {
    const double t0 = seconds_now(), c0 = cpu_seconds_now();
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(body, t);
    body(0);
    for (auto& th : pool) th.join();
    const double flops = 2.0 * kChains * static_cast<double>(kLaneSteps / lanes * lanes) * threads;
    best = std::max(best, flops / (seconds_now() - t0) / 1e9);
    *per_cpu_s = std::max(*per_cpu_s, flops / (cpu_seconds_now() - c0) / 1e9);
  }
  return best;
}

double fma_peak_gflops(int threads, double* per_cpu_s) {
  const std::string isa = dilattn_cpu_isa();
  float (*loop)() = peak_loop_sse;
  int lanes = 4;
#if defined(__x86_64__) && defined(__GNUC__)
  // (The f32 FMA peak on avx512bf16 too: its f32 calls use these instructions.)
  if (isa == "avx512" || isa == "avx512bf16") { loop = peak_loop_avx512; lanes = 16; }
  if (isa == "avx2" || isa == "bf16emu") { loop = peak_loop_avx2; lanes = 8; }
#endif
  return loop_gflops(loop, lanes, threads, per_cpu_s);
}

// The bf16 pair-product peak (vdpbf16ps) where the library chose avx512bf16, else 0.
double bf16_pair_peak_gflops(int threads, double* per_cpu_s) {
  *per_cpu_s = 0;
#if defined(__x86_64__) && defined(__GNUC__)
  if (std::string(dilattn_cpu_isa()) == "avx512bf16")
    return loop_gflops(peak_loop_bf16_pairs, 32, threads, per_cpu_s);
#endif
  (void)threads;
  return 0;
}

// ---------------------------------------------------------------- the machine
std::string cpuinfo_field(const char* key) {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? "" : line.substr(colon + 2);
    }
  return "unknown";
}

std::string simd_flags() {
  std::istringstream flags(cpuinfo_field("flags"));
  std::string f, out;
  for (; flags >> f;)
    if (f == "sse2" || f == "avx" || f == "avx2" || f == "fma" || f == "avx512f" ||
        f == "avx512bw" || f == "avx512_bf16" || f == "amx_tile")
      out += (out.empty() ? "" : " ") + f;
  return out;
}

std::vector<BenchCase> f32_cases(bool quick) {
  std::vector<BenchCase> cases;
  const int64_t scale = quick ? 8 : 1;  // --quick: every N divided by 8
  BenchCase main_case;
  main_case.N = 8192 / scale;
  main_case.name = "main_dilated_N" + std::to_string(main_case.N);
  cases.push_back(main_case);
  for (int64_t n = 8192; n <= 262144; n *= 2) {
    if (quick && n > 32768) break;
    BenchCase s = main_case;
    s.N = n / scale;
    s.name = "sweep_dilated_N" + std::to_string(s.N);
    cases.push_back(s);
  }
  for (bool causal : {false, true}) {
    BenchCase d;
    d.dilated = false;
    d.causal = causal;
    d.N = 4096 / scale;
    d.name = std::string("dense_N") + std::to_string(d.N) + (causal ? "_causal" : "");
    cases.push_back(d);
  }
  // Small calls, where starting threads per call would show: a decode step (one query row
  // against a 4096-key cache) and a short dense sequence.
  BenchCase decode;
  decode.dilated = false;
  decode.Nq = 1;
  decode.N = 4096;
  decode.name = "decode_Nq1_Nk4096";
  cases.push_back(decode);
  BenchCase small;
  small.dilated = false;
  small.N = 256;
  small.name = "small_dense_N256";
  cases.push_back(small);
  // SPEC 10.1: a sliding window of 4096 keys (left, and right = 0) on a long sequence, against
  // dense causal N = 8192, whose rows see 4096 keys on average too: compare ns/token.
  BenchCase window;
  window.dilated = false;
  window.N = 65536 / scale;
  window.window_left = 4096 / scale;
  window.window_right = 0;
  window.name = "window" + std::to_string(window.window_left) + "_N" + std::to_string(window.N);
  cases.push_back(window);
  BenchCase dense_causal;
  dense_causal.dilated = false;
  dense_causal.causal = true;
  dense_causal.N = 8192 / scale;
  dense_causal.name = "dense_N" + std::to_string(dense_causal.N) + "_causal";
  cases.push_back(dense_causal);
  // SPEC 10.2: 64 causal documents of 128 .. 4096 tokens (a fixed LCG draws the lengths), one
  // packed batch against the same documents one call each.
  BenchCase packed;
  packed.dilated = false;
  packed.causal = true;
  uint64_t state = 12345;
  for (int d = 0; d < 64; ++d) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    packed.docs.push_back((128 + static_cast<int64_t>((state >> 33) % (4096 - 128 + 1))) / scale);
  }
  for (int64_t n : packed.docs) packed.N += n;
  packed.name = "packed_64docs_N" + std::to_string(packed.N);
  cases.push_back(packed);
  BenchCase separate = packed;
  separate.one_by_one = true;
  separate.name = "one_by_one_64docs_N" + std::to_string(packed.N);
  cases.push_back(separate);
  // The same shapes with dropout p = 0.1: their time over the rows above is the draws' cost.
  BenchCase dropout_main = main_case;
  dropout_main.dropout_p = 0.1;
  dropout_main.name = main_case.name + "_dropout0.1";
  cases.push_back(dropout_main);
  for (bool causal : {false, true}) {
    BenchCase d;
    d.dilated = false;
    d.causal = causal;
    d.dropout_p = 0.1;
    d.N = 4096 / scale;
    d.name = std::string("dense_N") + std::to_string(d.N) + (causal ? "_causal" : "") +
             "_dropout0.1";
    cases.push_back(d);
  }
  BenchCase big = main_case;
  big.N = quick ? 16384 : 1048576;
  big.backward = false;
  big.name = "long_dilated_N" + std::to_string(big.N);
  cases.push_back(big);
  return cases;
}

// The cases in the dtypes --dtype asks for: f32, bf16 (names + "_bf16"), or both, f32 first.
std::vector<BenchCase> all_cases(bool quick, const std::string& dtype) {
  const std::vector<BenchCase> f32 = f32_cases(quick);
  std::vector<BenchCase> cases;
  if (dtype != "bf16") cases = f32;
  if (dtype != "f32")
    for (BenchCase c : f32) {
      c.dtype = DILATTN_BF16;
      c.name += "_bf16";
      cases.push_back(c);
    }
  return cases;
}

// Whether name contains one of the comma-separated parts of `only`.
bool name_matches(const std::string& name, const std::string& only) {
  std::istringstream parts(only);
  std::string part;
  while (std::getline(parts, part, ','))
    if (!part.empty() && name.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  int repeats = 5;
  std::string json_path, only, dtype = "f32";
  int one_case = -1;
  bool peak_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--peak") peak_only = true;
    else if (a == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--only" && i + 1 < argc) only = argv[++i];
    else if (a == "--case" && i + 1 < argc) one_case = std::atoi(argv[++i]);
    else if (a == "--dtype" && i + 1 < argc &&
             (std::string(argv[i + 1]) == "f32" || std::string(argv[i + 1]) == "bf16" ||
              std::string(argv[i + 1]) == "both"))
      dtype = argv[++i];
    else {
      std::fprintf(stderr, "usage: %s [--quick] [--repeats R] [--json FILE] [--only NAME[,NAME...]] [--dtype f32|bf16|both] [--peak]\n", argv[0]);
      return 2;
    }
  }
  if (quick && repeats == 5) repeats = 2;
  const std::vector<BenchCase> cases = all_cases(quick, dtype);

  if (one_case >= 0) {  // child: one case, one result line on stdout
    // Long cases take seconds each: fewer repeats keep the full run to minutes.
    const BenchCase& c = cases.at(static_cast<size_t>(one_case));
    // Small calls take microseconds: many repeats make their median meaningful.
    const bool tiny = c.Nq == 1 || c.N <= 256;
    const Result r = run_case(c, c.N > 300000            ? 1
                                 : c.N >= 65536          ? std::min(repeats, 2)
                                 : tiny                  ? std::max(repeats, 400)
                                                         : repeats);
    std::printf("%.9g %.9g %.17g %ld %.17g %.9g %.9g %.9g %.9g %.9g %.9g\n", r.fwd_s, r.bwd_s,
                r.pairs, r.peak_rss, r.tensor_bytes, r.fwd_cpu_s, r.bwd_cpu_s,
                r.paired_fwd_cpu_s, r.paired_base_fwd_cpu_s, r.paired_bwd_cpu_s,
                r.paired_base_bwd_cpu_s);
    return 0;
  }

  // Threads the plans use: what the library resolves for num_threads 0.
  const unsigned hw = std::thread::hardware_concurrency();
  int threads = hw ? static_cast<int>(hw) : 1;
  if (const char* env = std::getenv("DILATTN_NUM_THREADS")) threads = std::max(1, std::atoi(env));
  double peak_cpu = 0, peak1_cpu = 0;
  const double peak = fma_peak_gflops(threads, &peak_cpu);
  double pairs_cpu = 0, pairs1_cpu = 0;
  const double pairs_peak = bf16_pair_peak_gflops(threads, &pairs_cpu);
  if (peak_only) {  // for scripts (torch_sdpa_compare.py): one JSON line
    std::printf("{\"cpu_isa\": \"%s\", \"threads\": %d, \"fma_peak_gflops\": %.6g, "
                "\"fma_peak_gflops_per_cpu_second\": %.6g, \"bf16_pair_peak_gflops\": %.6g}\n",
                dilattn_cpu_isa(), threads, peak, peak_cpu, pairs_peak);
    return 0;
  }
  const double peak1 = fma_peak_gflops(1, &peak1_cpu);
  const double pairs_peak1 = bf16_pair_peak_gflops(1, &pairs1_cpu);
  const std::string model = cpuinfo_field("model name"), flags = simd_flags();
  std::printf("machine: %s, %u logical cores, flags: %s\n", model.c_str(), hw, flags.c_str());
  std::printf("build:   %s\n", dilattn_build_info());
  std::printf("threads: %d; FMA peak %.1f GFLOP/s (%d threads), %.1f GFLOP/s (1 thread), "
              "%.1f GFLOP per CPU-second; cpu backend ISA %s\n",
              threads, peak, threads, peak1, peak_cpu, dilattn_cpu_isa());
  // One thread's time per instruction: a 16-lane FMA does 32 flops, a vdpbf16ps 64.
  if (pairs_peak > 0)
    std::printf("bf16 pair products (vdpbf16ps): %.1f GFLOP/s (%d threads), %.1f GFLOP/s "
                "(1 thread); one thread: %.3f ns per vdpbf16ps, %.3f ns per 16-lane f32 FMA\n",
                pairs_peak, threads, pairs_peak1, 64.0 / pairs_peak1, 32.0 / peak1);
  std::printf("eff = fwd GFLOP/s / FMA peak (wall); cpu-eff (and bwd cpu-eff) = the same per "
              "CPU-second (less "
              "disturbed by other load)\n");
  std::printf("\n%-26s %9s %9s %7s %8s %8s %9s %8s %8s %9s %9s %7s\n", "case", "fwd s",
              "fwd GF/s", "eff", "cpu-eff", "bwd s", "bwd GF/s", "bwd cpu-eff", "bwd/fwd",
              "ns/token", "RSS MiB", "RSS/in");

  std::ostringstream json;
  json << "{\n  \"machine\": {\"cpu\": \"" << model << "\", \"logical_cores\": " << hw
       << ", \"flags\": \"" << flags << "\", \"cpu_isa\": \"" << dilattn_cpu_isa() << "\""
       << "},\n  \"threads\": " << threads << ",\n  \"quick\": " << (quick ? "true" : "false")
       << ",\n  \"repeats\": " << repeats << ",\n  \"fma_peak_gflops\": " << peak
       << ",\n  \"fma_peak_gflops_1thread\": " << peak1
       << ",\n  \"fma_peak_gflops_per_cpu_second\": " << peak_cpu
       << ",\n  \"bf16_pair_peak_gflops\": " << pairs_peak
       << ",\n  \"bf16_pair_peak_gflops_1thread\": " << pairs_peak1 << ",\n  \"cases\": [";
  bool first = true;
  std::vector<std::pair<std::string, Result>> done;  // for the dropout rows' cost
  for (size_t i = 0; i < cases.size(); ++i) {
    const BenchCase& c = cases[i];
    if (!only.empty() && !name_matches(c.name, only)) continue;
    const std::string cmd = std::string(argv[0]) + " --case " + std::to_string(i) +
                            " --repeats " + std::to_string(repeats) + " --dtype " + dtype +
                            (quick ? " --quick" : "");
    FILE* child = popen(cmd.c_str(), "r");
    Result r;
    if (!child ||
        std::fscanf(child, "%lf %lf %lf %ld %lf %lf %lf %lf %lf %lf %lf", &r.fwd_s, &r.bwd_s,
                    &r.pairs, &r.peak_rss, &r.tensor_bytes, &r.fwd_cpu_s, &r.bwd_cpu_s,
                    &r.paired_fwd_cpu_s, &r.paired_base_fwd_cpu_s, &r.paired_bwd_cpu_s,
                    &r.paired_base_bwd_cpu_s) != 11) {
      std::fprintf(stderr, "cpu_bench: case %s failed\n", c.name.c_str());
      if (child) pclose(child);
      return 1;
    }
    if (pclose(child) != 0) return 1;
    const double fwd_gf = 4.0 * c.D * r.pairs / r.fwd_s / 1e9;
    const double bwd_gf = r.bwd_s > 0 ? 2.5 * 4.0 * c.D * r.pairs / r.bwd_s / 1e9 : 0;
    const double ns_token = r.fwd_s / static_cast<double>(c.B * (c.Nq > 0 ? c.Nq : c.N)) * 1e9;
    const double cpu_eff = 4.0 * c.D * r.pairs / r.fwd_cpu_s / 1e9 / peak_cpu;
    const double bwd_cpu_eff =
        r.bwd_cpu_s > 0 ? 2.5 * 4.0 * c.D * r.pairs / r.bwd_cpu_s / 1e9 / peak_cpu : 0;
    std::printf("%-26s %9.4g %9.1f %6.1f%% %7.1f%% %8.4g %9.1f %10.1f%% %8.2f %9.1f %9.1f %7.2f\n",
                c.name.c_str(), r.fwd_s, fwd_gf, 100 * fwd_gf / peak, 100 * cpu_eff, r.bwd_s, bwd_gf,
                100 * bwd_cpu_eff,
                bwd_gf > 0 ? bwd_gf / fwd_gf : 0.0, ns_token, r.peak_rss / 1048576.0,
                r.peak_rss / r.tensor_bytes);
    std::fflush(stdout);
    json << (first ? "\n" : ",\n") << "    {\"name\": \"" << c.name << "\", \"kind\": \""
         << (c.dilated ? "dilated" : c.one_by_one ? "dense, one call per document"
             : !c.docs.empty() ? "dense, packed" : "dense") << "\", \"B\": " << c.B << ", \"Nq\": " << (c.Nq > 0 ? c.Nq : c.N) << ", \"N\": " << c.N
         << ", \"H\": " << c.H << ", \"D\": " << c.D << ", \"causal\": " << (c.causal ? "true" : "false")
         << ", \"window\": [" << c.window_left << ", " << c.window_right << "], \"documents\": "
         << c.docs.size()
         << ", \"head_mode\": \"groups\", \"dropout_p\": " << c.dropout_p
         << ", \"dtype\": \"" << (c.dtype == DILATTN_BF16 ? "bf16" : "f32") << "\""
         << ", \"pairs\": " << r.pairs << ", \"forward_s\": " << r.fwd_s
         << ", \"forward_gflops\": " << fwd_gf << ", \"forward_efficiency\": " << fwd_gf / peak
         << ", \"forward_cpu_s\": " << r.fwd_cpu_s << ", \"forward_cpu_efficiency\": " << cpu_eff
         << ", \"backward_s\": " << r.bwd_s << ", \"backward_cpu_s\": " << r.bwd_cpu_s
         << ", \"backward_gflops\": " << bwd_gf
         << ", \"ns_per_token\": " << ns_token << ", \"peak_rss_bytes\": " << r.peak_rss
         << ", \"qkvo_lse_bytes\": " << r.tensor_bytes << "}";
    first = false;
    done.emplace_back(c.name, r);
  }
  json << "\n  ]";
  // Dropout's cost: each dropout row's least CPU-seconds over those of the same call without
  // dropout, measured in turn in the same process (Result); the process's CPU time is disturbed
  // less than wall time by other load on the machine.
  bool header = false;
  for (const auto& [name, r] : done) {
    if (r.paired_base_fwd_cpu_s <= 0) continue;
    if (!header) {
      std::printf("\ndropout cost (least CPU-seconds over the same call without dropout, run in "
                  "turn):\n");
      json << ",\n  \"dropout_cost\": [";
    }
    const double fwd = r.paired_fwd_cpu_s / r.paired_base_fwd_cpu_s - 1;
    const double bwd =
        r.paired_base_bwd_cpu_s > 0 ? r.paired_bwd_cpu_s / r.paired_base_bwd_cpu_s - 1 : 0;
    std::printf("  %-32s forward %+6.1f%% (%.4g s over %.4g s)  backward %+6.1f%% (%.4g s over "
                "%.4g s)\n", name.c_str(), 100 * fwd, r.paired_fwd_cpu_s,
                r.paired_base_fwd_cpu_s, 100 * bwd, r.paired_bwd_cpu_s, r.paired_base_bwd_cpu_s);
    json << (header ? ",\n" : "\n") << "    {\"name\": \"" << name << "\", \"forward\": " << fwd
         << ", \"backward\": " << bwd << ", \"forward_cpu_s\": " << r.paired_fwd_cpu_s
         << ", \"forward_cpu_s_without\": " << r.paired_base_fwd_cpu_s
         << ", \"backward_cpu_s\": " << r.paired_bwd_cpu_s
         << ", \"backward_cpu_s_without\": " << r.paired_base_bwd_cpu_s << "}";
    header = true;
  }
  if (header) json << "\n  ]";
  // --dtype both: each case's bf16 speed over its f32 speed (f32 seconds / bf16 seconds), wall
  // time and CPU time, forward and backward.
  header = false;
  for (const auto& [name, bf] : done) {
    const size_t suffix = name.size() >= 5 ? name.size() - 5 : 0;
    if (name.compare(suffix, std::string::npos, "_bf16") != 0) continue;
    const std::string base = name.substr(0, suffix);
    for (const auto& [other, f] : done) {
      if (other != base) continue;
      if (!header) {
        std::printf("\nbf16 over f32 (f32 seconds / bf16 seconds; > 1: bf16 faster):\n");
        json << ",\n  \"bf16_speedup\": [";
      }
      const double fwd = f.fwd_s / bf.fwd_s, fwd_cpu = f.fwd_cpu_s / bf.fwd_cpu_s;
      const double bwd = bf.bwd_s > 0 ? f.bwd_s / bf.bwd_s : 0;
      const double bwd_cpu = bf.bwd_cpu_s > 0 ? f.bwd_cpu_s / bf.bwd_cpu_s : 0;
      std::printf("  %-32s forward %.2fx (CPU time %.2fx)  backward %.2fx (CPU time %.2fx)\n",
                  base.c_str(), fwd, fwd_cpu, bwd, bwd_cpu);
      json << (header ? ",\n" : "\n") << "    {\"name\": \"" << base << "\", \"forward\": " << fwd
           << ", \"forward_cpu\": " << fwd_cpu << ", \"backward\": " << bwd
           << ", \"backward_cpu\": " << bwd_cpu << "}";
      header = true;
    }
  }
  if (header) json << "\n  ]";
  json << "\n}\n";
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json.str();
    std::printf("\nwrote %s\n", json_path.c_str());
  }
  return 0;
}
