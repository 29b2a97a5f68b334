// gpu_bench.cpp - the cuda backend's forward and backward on a GPU: dense, causal, dilated and
// block-sparse attention in f16, bf16 and f32, timed with cudaEvents around dilattn_forward and
// dilattn_backward.
//
// TFLOP/s by FlashAttention's formula: forward 4 * B * H * Nq * Nk * D for dense, halved for
// causal; for dilated and block-sparse, 4 * D * (the score terms the plan computes, from
// dilattn_plan_score_count: the same index rules the kernels use; useful FLOPs, not the FLOPs of
// the dense problem); backward 2.5 times the forward's. After 2 warm-up calls, forward and
// backward are each timed until --iters samples or until their timed calls add up to
// --row-budget-ms (at least one sample), and the median is reported with its sample count: a
// slow kernel (the backward at large N) then costs a bounded time per row, so a run under a
// time limit (bench/gpu/first_light.sh) reaches its last row.
// --only KIND and --dtype T keep the rows of one kind / dtype (Nsight Compute runs one kernel
// that way: bench/gpu/first_light.sh). --options NAME gives every row one option of SPEC 10 or
// 11, so that a run beside the plain one (the default) measures what that option's kernel
// instance costs: dropout (p = 0.1, through dilattn_forward_ex / dilattn_backward_ex with the
// offset advanced every call, as a training loop does), window (1024 keys to the left, none to
// the right), softcap (50, Gemma 2's), alibi (the usual slopes 2^(-8 (h + 1) / H)) or sinks
// (one zero logit per head). TFLOP/s count the pairs the plan keeps (a window keeps fewer).
// Without a GPU (no CUDA device, or the cuda backend unavailable) it prints "no GPU" and exits 0.
// Prints a table for people (line-buffered) and writes JSON (--json FILE, default
// gpu_bench.json) for scripts; both name the GPU. The JSON is rewritten whole after every row,
// "complete": false until the last: a run killed part-way leaves the rows it measured in a
// valid file. It names the commit (environment variable DILATTN_COMMIT) and the date.
// Usage: bench_gpu [--json FILE] [--iters N] [--row-budget-ms MS] [--quick] [--options NAME]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "dilattn.h"

namespace {

struct BenchCase {
  std::string name;
  dilattn_dtype dtype;
  int64_t B, N, H, D;
  dilattn_kind kind;
  bool causal;
  std::vector<int64_t> segments, dilations;  // dilated
  std::string pattern;                       // block-sparse (dilattn_mask_from_pattern)
};

struct Result {
  BenchCase c;
  double ms = 0, tflops = 0, useful_flops = 0;
  double bwd_ms = 0, bwd_tflops = 0;  // 0 with --no-backward
  int samples = 0, bwd_samples = 0;   // timed calls behind each median
  std::string status;                 // "ok", else what failed and dilattn's message
};

// The option every row of a run gets (--options): one of kOptionNames.
const char* const kOptionNames[] = {"plain", "dropout", "window", "softcap", "alibi", "sinks"};

// How long each row may spend timing one direction (forward or backward).
struct Timing {
  int iters;         // samples wanted
  double budget_ms;  // the timed calls of one direction stop adding samples past this
};

size_t element_bytes(dilattn_dtype t) { return t == DILATTN_F32 ? 4 : 2; }

float median(std::vector<float> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// 2 untimed warm-up calls, then timed calls until t.iters samples or until they add up to
// t.budget_ms, at least one. Stops at the first call that fails and returns its status.
dilattn_status time_calls(const std::function<dilattn_status()>& call, const Timing& t,
                          cudaEvent_t start, cudaEvent_t stop, std::vector<float>* times) {
  double spent_ms = 0;
  for (int it = 0;; ++it) {
    const bool warm_up = it < 2;
    if (!warm_up && (static_cast<int>(times->size()) >= t.iters ||
                     (!times->empty() && spent_ms >= t.budget_ms)))
      return DILATTN_SUCCESS;
    cudaEventRecord(start);
    const dilattn_status s = call();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    if (s != DILATTN_SUCCESS) return s;
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    if (!warm_up) {
      times->push_back(ms);
      spent_ms += ms;
    }
  }
}

// The description's settings of --options (the per-call values are in run_case).
void set_option(dilattn_desc desc, const std::string& option, int64_t H) {
  if (option == "dropout") dilattn_desc_set_dropout(desc, 0.1);
  if (option == "window") dilattn_desc_set_window(desc, 1024, 0);
  if (option == "softcap") dilattn_desc_set_softcap(desc, 50.0);
  if (option == "sinks") dilattn_desc_set_sinks(desc, 1);
  if (option == "alibi") {
    std::vector<double> slopes(static_cast<size_t>(H));
    for (int64_t h = 0; h < H; ++h)
      slopes[static_cast<size_t>(h)] = std::pow(2.0, -8.0 * static_cast<double>(h + 1) / H);
    dilattn_desc_set_alibi(desc, slopes.data(), H);
  }
}

Result run_case(const BenchCase& c, const Timing& timing, bool backward,
                const std::string& option) {
  Result r;
  r.c = c;
  dilattn_desc desc = nullptr;
  dilattn_mask mask = nullptr;
  dilattn_desc_create(&desc);
  dilattn_desc_set_causal(desc, c.causal ? 1 : 0);
  set_option(desc, option, c.H);
  if (c.kind == DILATTN_KIND_DILATED)
    dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.segments.size()), c.segments.data(),
                             c.dilations.data(), DILATTN_HEADS_MOD);
  if (c.kind == DILATTN_KIND_BLOCK_SPARSE) {
    if (dilattn_mask_from_pattern(&mask, c.pattern.c_str(), c.N, c.N, 64, 64) != DILATTN_SUCCESS) {
      r.status = std::string("mask: ") + dilattn_last_error();
      dilattn_desc_destroy(desc);
      return r;
    }
    dilattn_desc_set_block_sparse(desc, mask);
  }
  dilattn_plan plan = nullptr;
  const dilattn_shape shape = dilattn_shape_make(c.B, c.N, c.N, c.H, c.H, c.D);
  dilattn_status s = dilattn_plan_create(&plan, desc, &shape, c.dtype, DILATTN_BACKEND_CUDA);
  dilattn_desc_destroy(desc);
  if (s != DILATTN_SUCCESS) {
    r.status = std::string("plan: ") + dilattn_last_error();
    if (mask) dilattn_mask_destroy(mask);
    return r;
  }
  const size_t n = static_cast<size_t>(c.B * c.N * c.H * c.D);
  const size_t bytes = n * element_bytes(c.dtype);
  void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr, *lse = nullptr;
  void *d_o = nullptr, *dq = nullptr, *dk = nullptr, *dv = nullptr;
  cudaMalloc(&q, bytes);
  cudaMalloc(&k, bytes);
  cudaMalloc(&v, bytes);
  cudaMalloc(&o, bytes);
  if (backward) {
    cudaMalloc(&d_o, bytes);
    cudaMalloc(&dq, bytes);
    cudaMalloc(&dk, bytes);
    cudaMalloc(&dv, bytes);
    cudaMemset(d_o, 0x3c, bytes);
  }
  cudaMalloc(&lse, static_cast<size_t>(c.B * c.H * c.N) * sizeof(float));
  cudaMemset(q, 0x3c, bytes);  // small finite values in every dtype
  cudaMemset(k, 0x3c, bytes);
  cudaMemset(v, 0x3c, bytes);
  auto view = [&](void* p) {
    dilattn_tensor t = dilattn_tensor_contiguous(p, c.dtype, c.B, c.N, c.H, c.D);
    t.device = DILATTN_DEVICE_CUDA;
    return t;
  };
  const dilattn_tensor tq = view(q), tk = view(k), tv = view(v), to = view(o);
  const dilattn_tensor tdo = view(d_o), tdq = view(dq), tdk = view(dk), tdv = view(dv);
  dilattn_tensor tl = dilattn_tensor_contiguous(lse, DILATTN_F32, c.B, c.H, c.N, 1);
  tl.device = DILATTN_DEVICE_CUDA;

  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  std::vector<float> times, bwd_times;
  // dropout and sinks travel per call (dilattn_call_options); the other options are the plan's.
  const std::vector<double> sinks(static_cast<size_t>(c.H), 0.0);
  std::vector<double> d_sinks(static_cast<size_t>(c.H), 0.0);
  dilattn_call_options options = dilattn_call_options_make();
  options.dropout_seed = 1234;
  if (option == "sinks") {
    options.sinks = sinks.data();
    options.d_sinks = d_sinks.data();
  }
  const bool ex = option == "dropout" || option == "sinks";
  s = time_calls([&] {
    ++options.dropout_offset;  // a new mask every call, as a training step takes
    return ex ? dilattn_forward_ex(plan, &tq, &tk, &tv, &to, &tl, &options, nullptr, 0)
              : dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0);
  }, timing, start, stop, &times);
  const bool forward_ok = s == DILATTN_SUCCESS;
  if (backward && forward_ok)
    s = time_calls([&] {
      return ex ? dilattn_backward_ex(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                                      &options, nullptr, 0)
                : dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                                   nullptr, 0);
    }, timing, start, stop, &bwd_times);
  if (s != DILATTN_SUCCESS) {
    r.status = std::string(forward_ok ? "backward: " : "forward: ") + dilattn_last_error();
  } else {
    r.ms = median(times);
    r.samples = static_cast<int>(times.size());
    // Dense: FlashAttention's formula exactly (N^2, halved for causal); else the score terms
    // the plan computes (dilattn_plan_score_count, summed over batches and heads).
    double pairs = 0;
    if (c.kind == DILATTN_KIND_DENSE && option != "window") {
      pairs = static_cast<double>(c.B) * static_cast<double>(c.H) * static_cast<double>(c.N) *
              static_cast<double>(c.N) / (c.causal ? 2.0 : 1.0);
    } else {
      int64_t terms = 0;
      dilattn_plan_score_count(plan, &terms);
      pairs = static_cast<double>(terms);
    }
    r.useful_flops = 4.0 * static_cast<double>(c.D) * pairs;
    r.tflops = r.useful_flops / (r.ms * 1e-3) / 1e12;
    if (backward) {
      r.bwd_ms = median(bwd_times);
      r.bwd_samples = static_cast<int>(bwd_times.size());
      r.bwd_tflops = 2.5 * r.useful_flops / (r.bwd_ms * 1e-3) / 1e12;
    }
    r.status = "ok";
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaFree(q);
  cudaFree(k);
  cudaFree(v);
  cudaFree(o);
  cudaFree(lse);
  for (void* p : {d_o, dq, dk, dv}) cudaFree(p);
  dilattn_plan_destroy(plan);
  if (mask) dilattn_mask_destroy(mask);
  return r;
}

const char* dtype_text(dilattn_dtype t) {
  return t == DILATTN_F16 ? "f16" : t == DILATTN_BF16 ? "bf16" : "f32";
}

const char* kind_name(dilattn_kind k) {
  return k == DILATTN_KIND_DENSE ? "dense" : k == DILATTN_KIND_DILATED ? "dilated" : "sparse";
}

// text as the inside of a JSON string: quotes, backslashes and control characters escaped.
std::string json_text(const std::string& text) {
  std::string out;
  for (const char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char code[8];
      std::snprintf(code, sizeof code, "\\u%04x", static_cast<unsigned>(ch));
      out += code;
    } else {
      out += ch;
    }
  }
  return out;
}

struct Run {
  std::string gpu, commit, date, option;
  Timing timing;
};

// The whole JSON file, rewritten after every row: written to PATH.tmp and renamed over PATH,
// so a reader (or a kill part-way) sees either the previous file or this one, never half.
bool write_json(const std::string& path, const Run& run, const std::vector<Result>& results,
                bool complete) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (f == nullptr) return false;
  std::fprintf(f,
               "{\n  \"machine\": \"%s\",\n  \"commit\": \"%s\",\n  \"date\": \"%s\",\n"
               "  \"options\": \"%s\",\n  \"iters\": %d,\n  \"row_budget_ms\": %.1f,\n"
               "  \"complete\": %s,\n  \"results\": [\n",
               json_text(run.gpu).c_str(), json_text(run.commit).c_str(), run.date.c_str(),
               run.option.c_str(), run.timing.iters, run.timing.budget_ms,
               complete ? "true" : "false");
  for (size_t n = 0; n < results.size(); ++n) {
    const Result& r = results[n];
    std::fprintf(f,
                 "    {\"kind\": \"%s\", \"dtype\": %d, \"B\": %lld, \"N\": %lld, \"H\": %lld, "
                 "\"D\": %lld, \"causal\": %s, \"ms\": %.6f, \"useful_flops\": %.6g, "
                 "\"tflops\": %.4f, \"samples\": %d, \"backward_ms\": %.6f, "
                 "\"backward_tflops\": %.4f, \"backward_samples\": %d, \"status\": \"%s\"%s%s%s}%s\n",
                 kind_name(r.c.kind), static_cast<int>(r.c.dtype), static_cast<long long>(r.c.B),
                 static_cast<long long>(r.c.N), static_cast<long long>(r.c.H),
                 static_cast<long long>(r.c.D), r.c.causal ? "true" : "false", r.ms,
                 r.useful_flops, r.tflops, r.samples, r.bwd_ms, r.bwd_tflops, r.bwd_samples,
                 r.status == "ok" ? "ok" : "error", r.status == "ok" ? "" : ", \"error\": \"",
                 r.status == "ok" ? "" : json_text(r.status).c_str(),
                 r.status == "ok" ? "" : "\"", n + 1 < results.size() ? "," : "");
  }
  std::fprintf(f, "  ]\n}\n");
  const bool written = std::fclose(f) == 0;
  return written && std::rename(tmp.c_str(), path.c_str()) == 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Line-buffered, so a run killed by a time limit keeps every row it printed.
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::string json_path = "gpu_bench.json";
  int iters = 10;
  double row_budget_ms = 1500;
  bool quick = false, backward = true;
  std::string only, only_dtype, option = "plain";
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--json") && a + 1 < argc) json_path = argv[++a];
    else if (!std::strcmp(argv[a], "--iters") && a + 1 < argc) iters = std::max(1, std::atoi(argv[++a]));
    else if (!std::strcmp(argv[a], "--row-budget-ms") && a + 1 < argc)
      row_budget_ms = std::max(0.0, std::atof(argv[++a]));
    else if (!std::strcmp(argv[a], "--quick")) quick = true;
    else if (!std::strcmp(argv[a], "--no-backward")) backward = false;
    else if (!std::strcmp(argv[a], "--only") && a + 1 < argc) only = argv[++a];
    else if (!std::strcmp(argv[a], "--dtype") && a + 1 < argc) only_dtype = argv[++a];
    else if (!std::strcmp(argv[a], "--options") && a + 1 < argc &&
             std::find(std::begin(kOptionNames), std::end(kOptionNames),
                       std::string(argv[a + 1])) != std::end(kOptionNames))
      option = argv[++a];
    else {
      std::fprintf(stderr,
                   "usage: %s [--json FILE] [--iters N] [--row-budget-ms MS] [--quick] [--no-backward] "
                   "[--only dense|causal|dilated|sparse] [--dtype f16|bf16|f32] "
                   "[--options plain|dropout|window|softcap|alibi|sinks]\n", argv[0]);
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0 ||
      !dilattn_backend_available(DILATTN_BACKEND_CUDA)) {
    std::printf("no GPU: the cuda backend cannot run here (%s); nothing measured\n",
                devices == 0 ? "no CUDA device" : "backend unavailable");
    return 0;
  }
  cudaDeviceProp props;
  cudaGetDeviceProperties(&props, 0);
  const std::string gpu = std::string(props.name) + ", sm_" + std::to_string(props.major) +
                          std::to_string(props.minor);

  const int64_t N = quick ? 2048 : 8192;
  std::vector<BenchCase> cases;
  for (dilattn_dtype t : {DILATTN_F16, DILATTN_BF16, DILATTN_F32})
    for (int64_t D : {64, 128})
      for (bool causal : {false, true})
        cases.push_back({"dense", t, 1, N, 16, D, DILATTN_KIND_DENSE, causal, {}, {}, ""});
  for (dilattn_dtype t : {DILATTN_F16, DILATTN_BF16})
    for (int64_t D : {64, 128}) {
      cases.push_back({"dilated", t, 1, N, 16, D, DILATTN_KIND_DILATED, false,
                       {N / 4, N / 2, N}, {1, 2, 4}, ""});
      cases.push_back({"sparse", t, 1, N, 16, D, DILATTN_KIND_BLOCK_SPARSE, false, {}, {},
                       "local:2+sink:1"});
    }

  // --only / --dtype: keep the rows asked for.
  std::vector<BenchCase> kept;
  for (const BenchCase& c : cases) {
    const std::string kind = c.kind == DILATTN_KIND_DENSE ? (c.causal ? "causal" : "dense")
                                                          : kind_name(c.kind);
    if ((only.empty() || only == kind) && (only_dtype.empty() || only_dtype == dtype_text(c.dtype)))
      kept.push_back(c);
  }
  cases = kept;
  Run run;
  run.gpu = gpu;
  const char* commit = std::getenv("DILATTN_COMMIT");
  run.commit = commit != nullptr && *commit != '\0' ? commit : "unknown";
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  std::strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &utc);
  run.date = date;
  run.timing = {iters, row_budget_ms};
  run.option = option;

  std::vector<Result> results;
  if (!write_json(json_path, run, results, false)) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::printf("dilattn GPU forward and backward benchmark on %s, commit %s, options %s: "
              "cudaEvent median of up to %d calls or %.0f ms per direction and row (n: calls "
              "timed)\n",
              gpu.c_str(), run.commit.c_str(), option.c_str(), iters, row_budget_ms);
  std::printf("%-8s %-5s %3s %6s %3s %4s %-6s %10s %8s %2s %10s %8s %2s  %s\n", "kind", "dtype",
              "B", "N", "H", "D", "causal", "fwd ms", "TFLOP/s", "n", "bwd ms", "TFLOP/s", "n",
              "status");
  for (const BenchCase& c : cases) {
    Result r = run_case(c, run.timing, backward, option);
    std::printf("%-8s %-5s %3lld %6lld %3lld %4lld %-6s %10.3f %8.2f %2d %10.3f %8.2f %2d  %s\n",
                kind_name(c.kind), dtype_text(c.dtype), static_cast<long long>(c.B),
                static_cast<long long>(c.N), static_cast<long long>(c.H),
                static_cast<long long>(c.D), c.causal ? "yes" : "no", r.ms, r.tflops, r.samples,
                r.bwd_ms, r.bwd_tflops, r.bwd_samples, r.status.c_str());
    results.push_back(r);
    if (!write_json(json_path, run, results, false)) {
      std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
      return 1;
    }
  }
  if (!write_json(json_path, run, results, true)) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::printf("wrote %s (%zu rows, complete)\n", json_path.c_str(), results.size());
  return 0;
}
