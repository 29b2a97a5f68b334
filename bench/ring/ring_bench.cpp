// ring_bench.cpp - ring attention (SPEC 5) on the threads transport: forward time and each
// rank's peak ring memory against the number of ranks P, for the seeds' dilated configuration
// (segments 2048,4096,8192, dilations 1,2,4, mod heads) and dense causal with the zigzag split.
//
// Every rank is one thread running the cpu backend with one worker, so P ranks use P threads
// (on a machine with fewer cores the ranks share them: the time then shows the ring's overhead
// on a fixed amount of CPU, not a speed-up). Peak memory is dilattn_comm_peak_bytes: what the
// ring held beyond the caller's shards (chunks in flight, partial and running O, workspaces),
// printed against the rank's shard bytes (Q, K, V, O, LSE). Median of --repeats runs after one
// warm-up. Table for people, JSON (--json FILE) for scripts; both name the machine.
// Usage: bench_ring [--json FILE] [--repeats R] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dilattn.h"
#include "dilattn_ring.h"

namespace {

struct Config {
  std::string name;
  int64_t N;
  bool dilated, causal;
  dilattn_ring_split split;
};

struct Row {
  Config c;
  int32_t P;
  double seconds = 0;
  double peak_ratio = 0;  // largest rank's peak ring bytes / its shard bytes
  size_t peak_bytes = 0;
  std::string status = "ok";
};

constexpr int64_t kB = 1, kH = 8, kD = 64;

void die(dilattn_status s, const char* what) {
  if (s == DILATTN_SUCCESS) return;
  std::fprintf(stderr, "bench_ring: %s: %s (%s)\n", what, dilattn_status_string(s),
               dilattn_last_error());
  std::exit(2);
}

dilattn_plan make_plan(const Config& c) {
  const int64_t segments[3] = {2048, 4096, 8192}, dilations[3] = {1, 2, 4};
  dilattn_desc desc = nullptr;
  die(dilattn_desc_create(&desc), "desc");
  if (c.dilated)
    die(dilattn_desc_set_dilated(desc, 3, segments, dilations, DILATTN_HEADS_MOD), "dilated");
  die(dilattn_desc_set_causal(desc, c.causal ? 1 : 0), "causal");
  die(dilattn_desc_set_num_threads(desc, 1), "threads");
  const dilattn_shape shape = dilattn_shape_make(kB, c.N, c.N, kH, kH, kD);
  dilattn_plan plan = nullptr;
  die(dilattn_plan_create(&plan, desc, &shape, DILATTN_F32, DILATTN_BACKEND_CPU), "plan");
  dilattn_desc_destroy(desc);
  return plan;
}

// One rank's shards, filled with a fixed pattern (the timing does not depend on the values).
struct Shard {
  int64_t rows = 0;
  std::vector<float> q, k, v, o, lse;
  dilattn_tensor tq, tk, tv, to, tl;
  void make(int64_t n) {
    rows = n;
    const size_t e = static_cast<size_t>(std::max<int64_t>(n, 1) * kH * kD);
    q.assign(e, 0.f);
    k.assign(e, 0.f);
    v.assign(e, 0.f);
    o.assign(e, 0.f);
    lse.assign(static_cast<size_t>(std::max<int64_t>(n, 1) * kH), 0.f);
    for (size_t i = 0; i < e; ++i) {
      q[i] = static_cast<float>((i * 7919) % 1000) * 1e-3f - 0.5f;
      k[i] = static_cast<float>((i * 104729) % 1000) * 1e-3f - 0.5f;
      v[i] = static_cast<float>((i * 1299709) % 1000) * 1e-3f - 0.5f;
    }
    tq = dilattn_tensor_contiguous(q.data(), DILATTN_F32, kB, n, kH, kD);
    tk = dilattn_tensor_contiguous(k.data(), DILATTN_F32, kB, n, kH, kD);
    tv = dilattn_tensor_contiguous(v.data(), DILATTN_F32, kB, n, kH, kD);
    to = dilattn_tensor_contiguous(o.data(), DILATTN_F32, kB, n, kH, kD);
    tl = dilattn_tensor_contiguous(lse.data(), DILATTN_F32, kB, kH, n, 1);
  }
  double bytes() const { return 4.0 * static_cast<double>(rows) * kH * (4 * kD + 1); }
};

Row run(const Config& c, int32_t P, int repeats) {
  Row row;
  row.c = c;
  row.P = P;
  dilattn_plan plan = make_plan(c);
  std::vector<Shard> shards(static_cast<size_t>(P));
  for (int32_t p = 0; p < P; ++p) {
    int64_t first[2], count[2];
    die(dilattn_ring_shard_rows(c.N, P, p, c.split, first, count), "shard rows");
    shards[static_cast<size_t>(p)].make(count[0] + count[1]);
  }
  std::vector<double> times;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    std::vector<dilattn_comm> comms(static_cast<size_t>(P));
    die(dilattn_comm_create_threads(P, 600000, comms.data()), "comm");
    std::vector<dilattn_status> status(static_cast<size_t>(P), DILATTN_SUCCESS);
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ranks;
    for (int32_t p = 0; p < P; ++p)
      ranks.emplace_back([&, p] {
        Shard& s = shards[static_cast<size_t>(p)];
        status[static_cast<size_t>(p)] = dilattn_ring_forward(
            plan, comms[static_cast<size_t>(p)], c.split, &s.tq, &s.tk, &s.tv, &s.to, &s.tl);
      });
    for (std::thread& t : ranks) t.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int32_t p = 0; p < P; ++p) {
      if (status[static_cast<size_t>(p)] != DILATTN_SUCCESS)
        row.status = dilattn_status_string(status[static_cast<size_t>(p)]);
      size_t peak = 0;
      dilattn_comm_peak_bytes(comms[static_cast<size_t>(p)], &peak);
      const double ratio = static_cast<double>(peak) / shards[static_cast<size_t>(p)].bytes();
      if (rep == repeats && ratio > row.peak_ratio) {
        row.peak_ratio = ratio;
        row.peak_bytes = peak;
      }
    }
    for (dilattn_comm comm : comms) dilattn_comm_destroy(comm);
    if (rep > 0) times.push_back(dt);
  }
  std::sort(times.begin(), times.end());
  row.seconds = times[times.size() / 2];
  dilattn_plan_destroy(plan);
  return row;
}

std::string machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "ring_bench.json";
  int repeats = 3;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") quick = true;
    else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--repeats R] [--quick]\n", argv[0]);
      return 2;
    }
  }
  const std::vector<Config> configs = {
      {"dilated_mod", quick ? 4096 : 8192, true, false, DILATTN_RING_CONTIGUOUS},
      {"dense_causal_zigzag", quick ? 2048 : 4096, false, true, DILATTN_RING_ZIGZAG},
  };
  const std::string cpu = machine();
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u logical cores; cpu backend ISA %s, 1 worker per rank; "
              "B=%lld H=%lld D=%lld f32\n",
              cpu.c_str(), cores, dilattn_cpu_isa(), static_cast<long long>(kB),
              static_cast<long long>(kH), static_cast<long long>(kD));
  std::printf("%-22s %6s %2s %10s %10s %14s\n", "case", "N", "P", "fwd s", "vs P=1",
              "peak/shards");
  std::vector<Row> rows;
  for (const Config& c : configs) {
    double base = 0;
    for (int32_t P : {1, 2, 4}) {
      const Row r = run(c, P, repeats);
      if (P == 1) base = r.seconds;
      std::printf("%-22s %6lld %2d %10.4f %9.2fx %13.2fx %s\n", c.name.c_str(),
                  static_cast<long long>(c.N), P, r.seconds, base / r.seconds, r.peak_ratio,
                  r.status == "ok" ? "" : r.status.c_str());
      rows.push_back(r);
    }
  }
  std::ofstream json(json_path);
  json << "{\"machine\": \"" << cpu << "\", \"logical_cores\": " << cores << ", \"isa\": \""
       << dilattn_cpu_isa() << "\", \"repeats\": " << repeats << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    json << (i ? ", " : "") << "{\"case\": \"" << r.c.name << "\", \"N\": " << r.c.N
         << ", \"P\": " << r.P << ", \"forward_s\": " << r.seconds
         << ", \"peak_ring_bytes\": " << r.peak_bytes << ", \"peak_over_shards\": " << r.peak_ratio
         << ", \"status\": \"" << r.status << "\"}";
  }
  json << "]}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return 0;
}
