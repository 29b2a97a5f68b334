// test_cpu_isa_concurrent.cpp - property: the cpu backend's persistent worker pool
// (cpu/cpu_thread_pool.h) serves calls from several user threads at once. 4 user threads
// call forward and backward on one shared plan (2 threads) and on one of their own (3 threads)
// at the same time, while the pool's helpers are busy with the others' calls; every result is
// bitwise equal to a single-threaded call's (SPEC 6: the cpu backend's results do not depend on
// which worker runs what), and nothing deadlocks (meson's timeout would end it). Then a child
// made by fork() after the pool has started (it has none of the parent's helper threads) gets
// the same results with 2 threads and exits (the library's destructors run there too). Public
// ABI only, on the instruction set this process chose.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "dilattn.h"

namespace {

constexpr int64_t kN = 1100, kH = 4, kHkv = 2, kD = 64;  // several work items per head
constexpr int kUserThreads = 4, kRounds = 6;

struct Outputs {
  std::vector<float> o, lse, dq, dk, dv;
  bool ok = true;
};

dilattn_plan make_plan(int32_t threads) {
  dilattn_desc desc;
  dilattn_plan plan = nullptr;
  if (dilattn_desc_create(&desc) != DILATTN_SUCCESS) return nullptr;
  const int64_t segments[] = {256, 1024}, dilations[] = {1, 2};
  dilattn_desc_set_dilated(desc, 2, segments, dilations, DILATTN_HEADS_MOD);
  dilattn_desc_set_causal(desc, 1);
  dilattn_desc_set_num_threads(desc, threads);
  const dilattn_shape shape = dilattn_shape_make(1, kN, kN, kH, kHkv, kD);
  if (dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU) != DILATTN_SUCCESS) {
    std::fprintf(stderr, "plan_create: %s\n", dilattn_last_error());
    plan = nullptr;
  }
  dilattn_desc_destroy(desc);
  return plan;
}

struct Inputs {
  std::vector<float> q, k, v, d_o;
};

// Forward, then backward from that forward's O and LSE.
Outputs run(dilattn_plan plan, Inputs& in) {
  Outputs out;
  const size_t nq = static_cast<size_t>(kN * kH * kD), nk = static_cast<size_t>(kN * kHkv * kD);
  out.o.assign(nq, 0);
  out.lse.assign(static_cast<size_t>(kH * kN), 0);
  out.dq.assign(nq, 0);
  out.dk.assign(nk, 0);
  out.dv.assign(nk, 0);
  auto view = [](std::vector<float>& x, int64_t heads) {
    return dilattn_tensor_contiguous(x.data(), DILATTN_F32, 1, kN, heads, kD);
  };
  dilattn_tensor q = view(in.q, kH), k = view(in.k, kHkv), v = view(in.v, kHkv);
  dilattn_tensor o = view(out.o, kH), d_o = view(in.d_o, kH), dq = view(out.dq, kH);
  dilattn_tensor dk = view(out.dk, kHkv), dv = view(out.dv, kHkv);
  dilattn_tensor lse = dilattn_tensor_contiguous(out.lse.data(), DILATTN_F32, 1, kH, kN, 1);
  out.ok = dilattn_forward(plan, &q, &k, &v, &o, &lse, nullptr, 0) == DILATTN_SUCCESS &&
           dilattn_backward(plan, &q, &k, &v, &o, &lse, &d_o, &dq, &dk, &dv, nullptr, 0) ==
               DILATTN_SUCCESS;
  return out;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// "" when equal, else what differs.
std::string differences(const Outputs& got, const Outputs& want) {
  if (!got.ok) return "a call failed";
  std::string d;
  if (!same(got.o, want.o)) d += " O";
  if (!same(got.lse, want.lse)) d += " LSE";
  if (!same(got.dq, want.dq)) d += " dQ";
  if (!same(got.dk, want.dk)) d += " dK";
  if (!same(got.dv, want.dv)) d += " dV";
  return d;
}

}  // namespace

int main() {
  std::printf("cpu backend ISA: %s\n", dilattn_cpu_isa());
  // Each user thread has its own inputs, so a mix-up between calls would show.
  std::vector<Inputs> inputs(kUserThreads);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (Inputs& in : inputs) {
    for (auto* x : {&in.q, &in.d_o}) { x->resize(static_cast<size_t>(kN * kH * kD)); for (float& e : *x) e = u(rng); }
    for (auto* x : {&in.k, &in.v}) { x->resize(static_cast<size_t>(kN * kHkv * kD)); for (float& e : *x) e = u(rng); }
  }
  dilattn_plan single = make_plan(1), shared = make_plan(2);
  if (single == nullptr || shared == nullptr) return 1;
  std::vector<Outputs> want;
  for (Inputs& in : inputs) want.push_back(run(single, in));

  std::vector<std::string> errors(kUserThreads);
  std::vector<std::thread> users;
  for (int t = 0; t < kUserThreads; ++t)
    users.emplace_back([&, t] {
      dilattn_plan own = make_plan(3);
      if (own == nullptr) { errors[t] = " plan_create failed"; return; }
      for (int round = 0; round < kRounds; ++round) {
        const std::string a = differences(run(shared, inputs[t]), want[t]);
        const std::string b = differences(run(own, inputs[t]), want[t]);
        if (!a.empty() && errors[t].empty())
          errors[t] = " round " + std::to_string(round) + ", shared 2-thread plan:" + a;
        if (!b.empty() && errors[t].empty())
          errors[t] = " round " + std::to_string(round) + ", own 3-thread plan:" + b;
      }
      dilattn_plan_destroy(own);
    });
  for (std::thread& t : users) t.join();
  dilattn_plan_destroy(single);

  int failures = 0;
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer cannot start threads in the child of a multi-threaded fork().
  std::printf("fork() part skipped under ThreadSanitizer\n");
  const bool check_fork = false;
#else
  const bool check_fork = true;
#endif
  std::fflush(stdout);
  const pid_t child = check_fork ? fork() : -2;
  if (child == 0) {  // the child: the parent's helpers are not here
    const std::string d = differences(run(shared, inputs[0]), want[0]);
    if (!d.empty()) std::fprintf(stderr, "FAILED after fork(), in the child:%s\n", d.c_str());
    std::exit(d.empty() ? 0 : 1);  // exit, not _exit: the library's static destructors run
  }
  int status = 0;
  if (check_fork && (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) ||
                     WEXITSTATUS(status) != 0)) {
    std::fprintf(stderr, "FAILED the child made by fork() did not finish its call cleanly\n");
    ++failures;
  }
  dilattn_plan_destroy(shared);

  for (int t = 0; t < kUserThreads; ++t)
    if (!errors[t].empty()) {
      std::fprintf(stderr, "FAILED user thread %d: differs from a single-threaded call:%s\n", t,
                   errors[t].c_str());
      ++failures;
    }
  std::printf("%s\n", failures ? "FAILED" : "ok");
  return failures != 0;
}
