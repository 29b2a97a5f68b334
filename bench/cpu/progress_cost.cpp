// progress_cost.cpp - what a progress callback costs the cpu backend (docs/spec.md section 14.11):
// each case's forward and backward timed three ways, interleaved in one run (the order rotating
// from repeat to repeat) so that the ratios see the same machine state:
//   plain     dilattn_forward / dilattn_backward;
//   ex        dilattn_forward_ex / dilattn_backward_ex with options and no callback (the path a
//             call without a callback takes: it must cost nothing);
//   callback  the same with a callback that only counts its calls (the work items are counted,
//             the calling thread reports, and the outputs go through a host copy).
// Prints a table and writes JSON (--json FILE) with the machine, the commit (--commit SHA) and
// the date. Also checks that the three give the same bits, and exits 1 if not.
// Run: meson setup build && ninja -C build bench/cpu/progress_cost
//      build/bench/cpu/progress_cost [--repeats R] [--json out.json] [--commit SHA] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dilattn.h"

namespace {

struct Case {
  std::string name;
  int64_t N;
  bool dilated, causal;
};

constexpr int64_t kB = 1, kH = 8, kD = 64;
const int64_t kSegments[] = {2048, 4096, 8192}, kDilations[] = {1, 2, 4};

void check(dilattn_status s, const char* what) {
  if (s == DILATTN_SUCCESS) return;
  std::fprintf(stderr, "%s: %s (%s)\n", what, dilattn_status_string(s), dilattn_last_error());
  std::exit(2);
}

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int count_calls(void* user, int64_t, int64_t) {
  ++*static_cast<int64_t*>(user);
  return 0;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

enum Mode { kPlain, kEx, kCallback, kModes };
const char* kModeNames[kModes] = {"plain", "ex", "callback"};

struct Timings {
  double forward[kModes], backward[kModes];
  int64_t forward_calls, backward_calls;
};

Timings run_case(const Case& c, int repeats) {
  dilattn_desc desc;
  check(dilattn_desc_create(&desc), "desc");
  if (c.dilated) {
    int32_t branches = 0;
    while (branches < 3 && kSegments[branches] <= c.N) ++branches;
    check(dilattn_desc_set_dilated(desc, branches, kSegments, kDilations, DILATTN_HEADS_MOD),
          "dilated");
  }
  check(dilattn_desc_set_causal(desc, c.causal ? 1 : 0), "causal");
  const dilattn_shape shape = dilattn_shape_make(kB, c.N, c.N, kH, kH, kD);
  dilattn_plan plan;
  check(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU), "plan");
  const size_t n = static_cast<size_t>(kB * c.N * kH * kD);
  std::vector<float> q(n), k(n), v(n), d_o(n);
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1.f, 1.f);
  for (auto* x : {&q, &k, &v, &d_o})
    for (float& e : *x) e = uniform(rng);
  std::vector<float> o[kModes], lse[kModes], dq[kModes], dk[kModes], dv[kModes];
  auto t4 = [&](std::vector<float>& x) {
    return dilattn_tensor_contiguous(x.data(), DILATTN_F32, kB, c.N, kH, kD);
  };
  dilattn_tensor tq = t4(q), tk = t4(k), tv = t4(v), tdo = t4(d_o);
  Timings t{};
  std::vector<double> fwd[kModes], bwd[kModes];
  for (int r = 0; r < repeats; ++r)
    for (int turn = 0; turn < kModes; ++turn) {
      const int m = (turn + r) % kModes;  // each mode first in turn: no order bias
      o[m].assign(n, 0.f);
      lse[m].assign(static_cast<size_t>(kB * kH * c.N), 0.f);
      dq[m].assign(n, 0.f);
      dk[m].assign(n, 0.f);
      dv[m].assign(n, 0.f);
      dilattn_tensor to = t4(o[m]), tdq = t4(dq[m]), tdk = t4(dk[m]), tdv = t4(dv[m]);
      dilattn_tensor tl = dilattn_tensor_contiguous(lse[m].data(), DILATTN_F32, kB, kH, c.N, 1);
      dilattn_call_options options = dilattn_call_options_make();
      int64_t calls_f = 0, calls_b = 0;
      double start = now();
      if (m == kPlain) {
        check(dilattn_forward(plan, &tq, &tk, &tv, &to, &tl, nullptr, 0), "forward");
      } else {
        if (m == kCallback) {
          options.progress = count_calls;
          options.progress_user = &calls_f;
        }
        check(dilattn_forward_ex(plan, &tq, &tk, &tv, &to, &tl, &options, nullptr, 0), "forward");
      }
      fwd[m].push_back(now() - start);
      start = now();
      if (m == kPlain) {
        check(dilattn_backward(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, nullptr, 0),
              "backward");
      } else {
        options.progress_user = &calls_b;
        check(dilattn_backward_ex(plan, &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv, &options,
                                  nullptr, 0),
              "backward");
      }
      bwd[m].push_back(now() - start);
      if (m == kCallback) {
        t.forward_calls = calls_f;
        t.backward_calls = calls_b;
      }
    }
  for (int m = 1; m < kModes; ++m)
    if (o[m] != o[0] || lse[m] != lse[0] || dq[m] != dq[0] || dk[m] != dk[0] || dv[m] != dv[0]) {
      std::fprintf(stderr, "%s: mode %s changed the results\n", c.name.c_str(), kModeNames[m]);
      std::exit(1);
    }
  for (int m = 0; m < kModes; ++m) {
    t.forward[m] = median(fwd[m]);
    t.backward[m] = median(bwd[m]);
  }
  dilattn_plan_destroy(plan);
  dilattn_desc_destroy(desc);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  int repeats = 5;
  bool quick = false;
  std::string json_path, commit = "unknown";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--repeats" && i + 1 < argc) repeats = std::atoi(argv[++i]);
    else if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--commit" && i + 1 < argc) commit = argv[++i];
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--repeats R] [--json FILE] [--commit SHA] [--quick]\n",
                   argv[0]);
      return 2;
    }
  }
  const int64_t scale = quick ? 8 : 1;
  const std::vector<Case> cases = {{"dilated_N" + std::to_string(32768 / scale), 32768 / scale, true, false},
                                   {"dense_causal_N" + std::to_string(4096 / scale), 4096 / scale, false, true}};
  char date[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(date, sizeof date, "%Y-%m-%d", std::gmtime(&t));
  std::printf("progress callback cost, cpu backend (%s), %s, commit %s, %s, median of %d\n",
              dilattn_cpu_isa(), cpu_model().c_str(), commit.c_str(), date, repeats);
  std::printf("%-22s %-9s %10s %10s %10s %12s %12s %6s\n", "case", "pass", "plain s", "ex s",
              "callback s", "ex/plain", "callback/ex", "calls");
  std::string json = "{\n  \"bench\": \"progress_cost\",\n  \"machine\": {\"cpu\": \"" + cpu_model() +
                     "\", \"isa\": \"" + dilattn_cpu_isa() + "\"},\n  \"commit\": \"" + commit +
                     "\",\n  \"date\": \"" + date + "\",\n  \"repeats\": " +
                     std::to_string(repeats) + ",\n  \"cases\": [\n";
  for (size_t c = 0; c < cases.size(); ++c) {
    const Timings tm = run_case(cases[c], repeats);
    const double* passes[2] = {tm.forward, tm.backward};
    const int64_t calls[2] = {tm.forward_calls, tm.backward_calls};
    for (int p = 0; p < 2; ++p) {
      const double* s = passes[p];
      std::printf("%-22s %-9s %10.4f %10.4f %10.4f %12.3f %12.3f %6lld\n", cases[c].name.c_str(),
                  p == 0 ? "forward" : "backward", s[kPlain], s[kEx], s[kCallback],
                  s[kEx] / s[kPlain], s[kCallback] / s[kEx], static_cast<long long>(calls[p]));
      char row[512];
      std::snprintf(row, sizeof row,
                    "    {\"case\": \"%s\", \"pass\": \"%s\", \"plain_s\": %.6f, \"ex_s\": %.6f, "
                    "\"callback_s\": %.6f, \"ex_over_plain\": %.4f, \"callback_over_ex\": %.4f, "
                    "\"callback_calls\": %lld}%s\n",
                    cases[c].name.c_str(), p == 0 ? "forward" : "backward", s[kPlain], s[kEx],
                    s[kCallback], s[kEx] / s[kPlain], s[kCallback] / s[kEx],
                    static_cast<long long>(calls[p]),
                    (c + 1 == cases.size() && p == 1) ? "" : ",");
      json += row;
    }
  }
  json += "  ]\n}\n";
  if (!json_path.empty()) {
    std::ofstream out(json_path);
    out << json;
  }
  return 0;
}
