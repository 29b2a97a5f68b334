// bench_sparse_density.cpp - block-sparse forward time versus mask density on the cpu backend
// (SPEC 4: "cost proportional to nnz").
//
// For each density p in {5%, 10%, 25%, 50%, 75%, 100%} it builds a seeded random block mask
// (dilattn_mask_random, one mask for all heads), times dilattn_forward (median of --reps runs
// after one warm-up) and reports time / actual density normalised to the 100% run: 1.0 means
// exactly proportional. The claim checked is that every ratio lies within 25% of 1.
// Prints a table for people and writes JSON for scripts (--json PATH), both naming the machine.
//
//   bench_sparse_density                 N=8192 H=8 D=64 block 64, 3 reps (the lead's run)
//   bench_sparse_density --quick         N=1024 H=2, 1 rep: checks that it runs
//   options: --n N --heads H --dim D --block B --reps R --threads T --json PATH --backward
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dilattn.h"

namespace {

// ---------------------------------------------------------------- options and machine
struct Options {
  int64_t N = 8192, H = 8, D = 64, block = 64;
  int reps = 3, threads = 0;
  bool backward = false, quick = false;
  std::string json;
};

bool parse(int argc, char** argv, Options* o) {
  for (int a = 1; a < argc; ++a) {
    const std::string s = argv[a];
    auto next = [&](int64_t* v) {
      if (a + 1 >= argc) return false;
      *v = std::atoll(argv[++a]);
      return *v > 0;
    };
    int64_t tmp = 0;
    if (s == "--quick") { o->quick = true; o->N = 1024; o->H = 2; o->reps = 1; }
    else if (s == "--backward") o->backward = true;
    else if (s == "--n") { if (!next(&o->N)) return false; }
    else if (s == "--heads") { if (!next(&o->H)) return false; }
    else if (s == "--dim") { if (!next(&o->D)) return false; }
    else if (s == "--block") { if (!next(&o->block)) return false; }
    else if (s == "--reps") { if (!next(&tmp)) return false; o->reps = static_cast<int>(tmp); }
    else if (s == "--threads") { if (!next(&tmp)) return false; o->threads = static_cast<int>(tmp); }
    else if (s == "--json" && a + 1 < argc) o->json = argv[++a];
    else return false;
  }
  return true;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

std::string json_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

#define TRY(call)                                                                   \
  do {                                                                              \
    dilattn_status s_ = (call);                                                     \
    if (s_ != DILATTN_SUCCESS) {                                                    \
      std::fprintf(stderr, "%s failed: %s\n", #call, dilattn_last_error());         \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)

struct Row {
  double target, density, seconds, ratio;
  int64_t nnz;
};

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, &opt)) {
    std::fprintf(stderr, "usage: %s [--quick] [--n N] [--heads H] [--dim D] [--block B] [--reps R] "
                         "[--threads T] [--backward] [--json PATH]\n", argv[0]);
    return 2;
  }
  if (!dilattn_backend_available(DILATTN_BACKEND_CPU)) {
    std::fprintf(stderr, "the cpu backend is not in this build\n");
    return 77;
  }
  const int64_t B = 1, N = opt.N, H = opt.H, D = opt.D, bs = opt.block;
  const int64_t blocks = (N + bs - 1) / bs;
  std::vector<float> q(B * N * H * D), k(q.size()), v(q.size()), o(q.size()), d_o(q.size()),
      dq(q.size()), dk(q.size()), dv(q.size()), lse(B * H * N);
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  for (auto* a : {&q, &k, &v, &d_o}) for (float& x : *a) x = normal(gen);
  auto T = [&](std::vector<float>& a) { return dilattn_tensor_contiguous(a.data(), DILATTN_F32, B, N, H, D); };
  dilattn_tensor tq = T(q), tk = T(k), tv = T(v), to = T(o), tdo = T(d_o), tdq = T(dq), tdk = T(dk),
                 tdv = T(dv), tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, B, H, N, 1);

  const double targets[] = {0.05, 0.10, 0.25, 0.50, 0.75, 1.00};
  std::vector<Row> rows;
  for (double p : targets) {
    dilattn_mask mask = nullptr;
    TRY(dilattn_mask_random(&mask, N, N, bs, bs, 1, p, 7, 0));
    int64_t nnz = 0;
    dilattn_bsr_view view;
    TRY(dilattn_mask_get(mask, &view, &nnz));
    dilattn_desc desc = nullptr;
    TRY(dilattn_desc_create(&desc));
    TRY(dilattn_desc_set_block_sparse(desc, mask));
    TRY(dilattn_desc_set_num_threads(desc, opt.threads));
    dilattn_plan plan = nullptr;
    const dilattn_shape shape = dilattn_shape_make(B, N, N, H, H, D);
    TRY(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU));
    auto run = [&] {
      TRY(dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0));
      if (opt.backward)
        TRY(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, 0));
    };
    run();  // warm-up: workspace, threads, caches
    std::vector<double> times;
    for (int r = 0; r < opt.reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      run();
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(times.begin(), times.end());
    rows.push_back({p, static_cast<double>(nnz) / static_cast<double>(blocks * blocks),
                    times[times.size() / 2], 0.0, nnz});
    dilattn_plan_destroy(plan);
    dilattn_desc_destroy(desc);
    dilattn_mask_destroy(mask);
  }
  // time / density, normalised so the 100% run is 1.0.
  const Row& full = rows.back();
  bool within = true;
  for (Row& r : rows) {
    r.ratio = (r.seconds / r.density) / (full.seconds / full.density);
    within = within && std::fabs(r.ratio - 1.0) <= 0.25;
  }

  const std::string machine = cpu_model();
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("block-sparse %s, cpu backend: B=%lld N=%lld H=%lld D=%lld block=%lld f32, threads=%d (0 = all)\n",
              opt.backward ? "forward+backward" : "forward", (long long)B, (long long)N, (long long)H,
              (long long)D, (long long)bs, opt.threads);
  std::printf("machine: %s, %u hardware threads\n\n", machine.c_str(), cores);
  std::printf("%8s %9s %10s %12s %14s\n", "target", "density", "nnz", "seconds", "time/density");
  for (const Row& r : rows)
    std::printf("%7.0f%% %8.2f%% %10lld %12.5f %14.3f\n", 100 * r.target, 100 * r.density,
                (long long)r.nnz, r.seconds, r.ratio);
  std::printf("\ntime proportional to density within 25%%: %s%s\n", within ? "yes" : "NO",
              opt.quick ? " (quick mode: too small to mean anything)" : "");

  if (!opt.json.empty()) {
    std::ofstream f(opt.json);
    f << "{\n  \"bench\": \"sparse_density\",\n  \"machine\": \"" << json_escape(machine)
      << "\",\n  \"hardware_threads\": " << cores << ",\n  \"build_info\": \""
      << json_escape(dilattn_build_info()) << "\",\n  \"pass\": \"" << (opt.backward ? "forward+backward" : "forward")
      << "\",\n  \"B\": " << B << ", \"N\": " << N << ", \"H\": " << H << ", \"D\": " << D
      << ", \"block\": " << bs << ", \"threads\": " << opt.threads << ", \"reps\": " << opt.reps
      << ", \"quick\": " << (opt.quick ? "true" : "false") << ",\n  \"rows\": [\n";
    for (size_t t = 0; t < rows.size(); ++t) {
      const Row& r = rows[t];
      f << "    {\"target_density\": " << r.target << ", \"density\": " << r.density
        << ", \"nnz_blocks\": " << r.nnz << ", \"seconds\": " << r.seconds
        << ", \"time_over_density_normalised\": " << r.ratio << "}" << (t + 1 < rows.size() ? "," : "") << "\n";
    }
    f << "  ],\n  \"proportional_within_25pct\": " << (within ? "true" : "false") << "\n}\n";
  }
  return 0;
}
