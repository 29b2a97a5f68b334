// pool_bench.cpp - the buddy pool against glibc malloc, and its fragmentation on the workspace
// trace of real attention plans.
//
// 1. Speed: one recorded trace (sizes log-uniform over 1 B .. 64 KiB, about 256 blocks live,
//    fixed seed) is replayed through dilattn_pool_alloc/free and through malloc/free; the
//    result is allocate/free pairs per second for each and their ratio (best of 5 runs each).
//    Neither touches the memory, so this times the allocators alone.
// 2. Fragmentation: plans for a range of dense, causal and dilated configurations report their
//    workspace sizes (dilattn_plan_workspace_size); those sizes are allocated in a growing host
//    pool in the order plans use them (each call's workspace is freed when the call ends, and a
//    "training step" keeps every layer's backward workspace live at once), and the pool's
//    statistics give internal fragmentation (rounding up to powers of two) and the peak.
// Prints a table for people and writes JSON (--json FILE, default pool_bench.json) for scripts;
// both name the machine. Usage: bench_pool [--ops N] [--json FILE]
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
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

// ---------------------------------------------------------------- machine

std::string machine() {
  std::string cpu = "unknown cpu";
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu = line.substr(line.find(':') + 2);
      break;
    }
  utsname u{};
  uname(&u);
  return cpu + ", " + std::to_string(std::thread::hardware_concurrency()) + " threads, " +
         u.sysname + " " + u.release;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---------------------------------------------------------------- 1. speed

struct Op {
  uint32_t slot;
  uint32_t bytes;  // 0: free the slot
};

std::vector<Op> make_trace(long ops) {
  std::mt19937_64 rng(42);
  std::vector<Op> trace;
  std::vector<uint32_t> live, idle;
  constexpr uint32_t kSlots = 512;
  for (uint32_t s = 0; s < kSlots; ++s) idle.push_back(s);
  while (static_cast<long>(trace.size()) < ops) {
    const bool alloc = live.empty() || (!idle.empty() && rng() % 512 >= live.size());
    if (alloc) {
      const size_t i = rng() % idle.size();
      const uint32_t s = idle[i];
      idle[i] = idle.back();
      idle.pop_back();
      const int shift = static_cast<int>(rng() % 17);
      trace.push_back({s, static_cast<uint32_t>(1 + rng() % (uint64_t{1} << shift))});
      live.push_back(s);
    } else {
      const size_t i = rng() % live.size();
      trace.push_back({live[i], 0});
      idle.push_back(live[i]);
      live[i] = live.back();
      live.pop_back();
    }
  }
  for (uint32_t s : live) trace.push_back({s, 0});
  return trace;
}

template <class Alloc, class Free>
double replay(const std::vector<Op>& trace, Alloc&& alloc, Free&& release) {
  std::vector<void*> slot(512, nullptr);
  const double t0 = now_s();
  for (const Op& op : trace) {
    if (op.bytes != 0) {
      slot[op.slot] = alloc(op.bytes);
    } else {
      release(slot[op.slot]);
    }
  }
  return now_s() - t0;
}

// ---------------------------------------------------------------- 2. plan workspaces

struct Config {
  const char* name;
  int64_t B, N, H, Hkv, D;
  int causal;
  std::vector<int64_t> w, r;  // empty: dense
};

struct PlanSizes {
  std::string name;
  std::string backend;
  size_t forward = 0, backward = 0;
};

std::vector<PlanSizes> plan_sizes(const std::vector<Config>& configs) {
  std::vector<PlanSizes> out;
  const dilattn_backend backends[] = {DILATTN_BACKEND_REF, DILATTN_BACKEND_CPU,
                                      DILATTN_BACKEND_EMU, DILATTN_BACKEND_CUDA};
  for (const Config& c : configs)
    for (dilattn_backend be : backends) {
      if (!dilattn_backend_available(be)) continue;
      dilattn_desc desc = nullptr;
      dilattn_desc_create(&desc);
      dilattn_desc_set_causal(desc, c.causal);
      if (!c.w.empty())
        dilattn_desc_set_dilated(desc, static_cast<int32_t>(c.w.size()), c.w.data(), c.r.data(),
                                 DILATTN_HEADS_MOD);
      dilattn_plan plan = nullptr;
      const dilattn_shape shape = dilattn_shape_make(c.B, c.N, c.N, c.H, c.Hkv, c.D);
      if (dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, be) ==
          DILATTN_SUCCESS) {
        PlanSizes s{c.name, dilattn_backend_name(be)};
        dilattn_plan_workspace_size(plan, &s.forward, &s.backward);
        out.push_back(s);
        dilattn_plan_destroy(plan);
      }
      dilattn_desc_destroy(desc);
    }
  return out;
}

dilattn_pool_stats stats_of(dilattn_pool pool) {
  dilattn_pool_stats s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  dilattn_pool_get_stats(pool, &s);
  return s;
}

struct Fragmentation {
  size_t allocations = 0, requested = 0, rounded = 0;  // summed over every allocation
  size_t peak_in_use = 0, peak_requested = 0, arenas = 0, arena_bytes = 0;
};

// Each plan's forward then backward workspace, one call at a time (what dispatch.cpp does),
// then a "training step": every plan's backward workspace live at once, freed in reverse.
Fragmentation fragmentation(const std::vector<PlanSizes>& plans) {
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, size_t{16} << 20);  // the default host pool's arena
  o.growth = DILATTN_POOL_GROW;
  dilattn_pool pool = nullptr;
  Fragmentation f;
  if (dilattn_pool_create_host(&pool, &o) != DILATTN_SUCCESS) return f;
  auto take = [&](size_t bytes) -> void* {
    void* p = nullptr;
    if (bytes == 0 || dilattn_pool_alloc(pool, bytes, &p) != DILATTN_SUCCESS) return nullptr;
    const dilattn_pool_stats s = stats_of(pool);
    ++f.allocations;
    f.requested += bytes;
    f.peak_requested = std::max(f.peak_requested, s.bytes_requested);
    return p;
  };
  for (const PlanSizes& p : plans)
    for (size_t bytes : {p.forward, p.backward}) {
      void* w = take(bytes);  // nothing else is live: bytes_in_use is this block
      if (w != nullptr) {
        f.rounded += stats_of(pool).bytes_in_use;
        dilattn_pool_free(pool, w);
      }
    }
  std::vector<void*> step;
  for (const PlanSizes& p : plans) {
    const size_t before = stats_of(pool).bytes_in_use;
    void* w = take(p.backward);
    if (w != nullptr) {
      f.rounded += stats_of(pool).bytes_in_use - before;
      step.push_back(w);
    }
  }
  const dilattn_pool_stats s = stats_of(pool);
  f.peak_in_use = s.peak_bytes_in_use;
  f.arenas = s.num_arenas;
  f.arena_bytes = s.arena_bytes_total;
  for (auto it = step.rbegin(); it != step.rend(); ++it) dilattn_pool_free(pool, *it);
  dilattn_pool_destroy(pool);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  long ops = 2000000;
  std::string json_path = "pool_bench.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--ops") == 0) ops = std::atol(argv[i + 1]);
    else if (std::strcmp(argv[i], "--json") == 0) json_path = argv[i + 1];
  }
  const std::string host = machine();
  std::printf("machine: %s\n\n", host.c_str());

  // 1. speed
  const std::vector<Op> trace = make_trace(ops);
  long pairs = 0;
  for (const Op& op : trace) pairs += op.bytes != 0;
  dilattn_pool_options o;
  dilattn_pool_options_init(&o, size_t{64} << 20);
  dilattn_pool pool = nullptr;
  if (dilattn_pool_create_host(&pool, &o) != DILATTN_SUCCESS) {
    std::fprintf(stderr, "pool: %s\n", dilattn_last_error());
    return 1;
  }
  long failures = 0;
  double pool_s = 1e30, malloc_s = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    pool_s = std::min(pool_s, replay(
        trace,
        [&](size_t bytes) {
          void* p = nullptr;
          if (dilattn_pool_alloc(pool, bytes, &p) != DILATTN_SUCCESS) ++failures;
          return p;
        },
        [&](void* p) { dilattn_pool_free(pool, p); }));
    malloc_s = std::min(malloc_s, replay(
        trace, [](size_t bytes) { return std::malloc(bytes); }, [](void* p) { std::free(p); }));
  }
  dilattn_pool_destroy(pool);
  const double pool_rate = static_cast<double>(pairs) / pool_s;
  const double malloc_rate = static_cast<double>(pairs) / malloc_s;
  std::printf("allocate/free pairs per second, %ld pairs, sizes 1 B .. 64 KiB, ~256 live:\n",
              pairs);
  std::printf("  %-24s %14.3e\n  %-24s %14.3e\n  %-24s %14.2f\n", "dilattn pool", pool_rate,
              "glibc malloc", malloc_rate, "ratio pool / malloc", pool_rate / malloc_rate);
  if (failures != 0) std::printf("  (pool failed %ld allocations)\n", failures);

  // 2. fragmentation on plan workspaces
  const std::vector<Config> configs = {
      {"dense B1 N1024 H8 D64", 1, 1024, 8, 8, 64, 0, {}, {}},
      {"dense causal B2 N2048 H16/4 D64", 2, 2048, 16, 4, 64, 1, {}, {}},
      {"dense B1 N4096 H8 D128", 1, 4096, 8, 8, 128, 0, {}, {}},
      {"dilated 3br B1 N8192 H8 D64", 1, 8192, 8, 8, 64, 0, {2048, 4096, 8192}, {1, 2, 4}},
      {"dilated 2br B4 N2048 H12 D64", 4, 2048, 12, 12, 64, 1, {512, 2048}, {1, 4}},
      {"dilated 4br B1 N16384 H16 D64", 1, 16384, 16, 16, 64, 0, {1024, 4096, 8192, 16384},
       {1, 2, 4, 8}},
      {"dense B1 N3000 H6 D80", 1, 3000, 6, 6, 80, 1, {}, {}},
      {"dilated 2br B3 N5000 H10 D96", 3, 5000, 10, 10, 96, 0, {1000, 5000}, {1, 5}},
  };
  const std::vector<PlanSizes> plans = plan_sizes(configs);
  std::printf("\nworkspace sizes reported by plans (bytes; block = rounded up in the pool):\n");
  std::printf("  %-34s %-5s %12s %12s %12s %12s\n", "config", "backend", "forward", "fwd block",
              "backward", "bwd block");
  auto block_of = [](size_t b) {
    if (b == 0) return size_t{0};
    size_t p = 256;
    while (p < b) p *= 2;
    return p;
  };
  for (const PlanSizes& p : plans)
    std::printf("  %-34s %-7s %12zu %12zu %12zu %12zu\n", p.name.c_str(), p.backend.c_str(),
                p.forward, block_of(p.forward), p.backward, block_of(p.backward));
  const Fragmentation f = fragmentation(plans);
  const double internal = f.rounded == 0 ? 0.0
                                         : 1.0 - static_cast<double>(f.requested) /
                                                     static_cast<double>(f.rounded);
  std::printf("\nfragmentation over %zu workspace allocations:\n", f.allocations);
  std::printf("  internal (rounding): %zu of %zu bytes handed out = %.1f%%\n",
              f.rounded - f.requested, f.rounded, 100.0 * internal);
  std::printf("  peak in use %zu bytes for a peak of %zu requested (%.2fx); %zu arenas, %zu bytes\n",
              f.peak_in_use, f.peak_requested,
              f.peak_requested ? static_cast<double>(f.peak_in_use) / static_cast<double>(f.peak_requested)
                               : 0.0,
              f.arenas, f.arena_bytes);

  std::FILE* js = std::fopen(json_path.c_str(), "w");
  if (js == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", json_path.c_str());
    return 1;
  }
  std::fprintf(js, "{\n  \"benchmark\": \"pool\",\n  \"machine\": \"%s\",\n", host.c_str());
  std::fprintf(js, "  \"speed\": {\"pairs\": %ld, \"pool_pairs_per_s\": %.6e, "
                   "\"malloc_pairs_per_s\": %.6e, \"ratio_pool_over_malloc\": %.4f, "
                   "\"pool_failures\": %ld},\n",
               pairs, pool_rate, malloc_rate, pool_rate / malloc_rate, failures);
  std::fprintf(js, "  \"plans\": [\n");
  for (size_t i = 0; i < plans.size(); ++i)
    std::fprintf(js, "    {\"config\": \"%s\", \"backend\": \"%s\", \"forward_bytes\": %zu, "
                     "\"backward_bytes\": %zu}%s\n",
                 plans[i].name.c_str(), plans[i].backend.c_str(), plans[i].forward,
                 plans[i].backward, i + 1 < plans.size() ? "," : "");
  std::fprintf(js, "  ],\n  \"fragmentation\": {\"allocations\": %zu, \"requested_bytes\": %zu, "
                   "\"rounded_bytes\": %zu, \"internal_fraction\": %.4f, \"peak_in_use\": %zu, "
                   "\"peak_requested\": %zu, \"arenas\": %zu, \"arena_bytes\": %zu}\n}\n",
               f.allocations, f.requested, f.rounded, internal, f.peak_in_use, f.peak_requested,
               f.arenas, f.arena_bytes);
  std::fclose(js);
  std::printf("\nwrote %s\n", json_path.c_str());
  return 0;
}
