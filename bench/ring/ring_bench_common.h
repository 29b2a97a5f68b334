// ring_bench_common.h - what both ring benchmarks share (ring_bench.cpp: threads transport, all
// ranks in one process; ring_bench_mpi.cpp: MPI transport, one rank per process under mpirun):
// the configurations, each rank's shards, the plan, the overlap measurement of one ring call
// (lib/ring/ring_stats.h) and the JSON row.
#ifndef DILATTN_BENCH_RING_COMMON_H
#define DILATTN_BENCH_RING_COMMON_H

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dilattn.h"
#include "dilattn_ring.h"
#include "ring_stats.h"
#include "ring_transport.h"

namespace ringbench {

struct Config {
  std::string name;
  int64_t N;
  bool dilated, causal;
  dilattn_ring_split split;
};

constexpr int64_t kB = 1, kH = 8, kD = 64;

// The seeds' dilated configuration (segments 2048,4096,8192, dilations 1,2,4, mod heads) and
// dense causal with the zigzag split.
inline std::vector<Config> configs(bool quick) {
  return {{"dilated_mod", quick ? 4096 : 8192, true, false, DILATTN_RING_CONTIGUOUS},
          {"dense_causal_zigzag", quick ? 2048 : 4096, false, true, DILATTN_RING_ZIGZAG}};
}

inline void die(dilattn_status s, const char* what) {
  if (s == DILATTN_SUCCESS) return;
  std::fprintf(stderr, "bench_ring: %s: %s (%s)\n", what, dilattn_status_string(s),
               dilattn_last_error());
  std::exit(2);
}

inline dilattn_plan make_plan(const Config& c) {
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
  void make(const Config& c, int32_t P, int32_t rank) {
    int64_t first[2], count[2];
    die(dilattn_ring_shard_rows(c.N, P, rank, c.split, first, count), "shard rows");
    const int64_t n = count[0] + count[1];
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
  // K and V of this shard, f32.
  size_t kv_bytes() const { return 2 * sizeof(float) * static_cast<size_t>(rows * kH * kD); }
  double bytes() const { return 4.0 * static_cast<double>(rows) * kH * (4 * kD + 1); }
  dilattn_status forward(dilattn_plan plan, dilattn_comm comm, const Config& c) {
    return dilattn_ring_forward(plan, comm, c.split, &tq, &tk, &tv, &to, &tl);
  }
};

// One rank's overlap in its last ring call: the time its exchanges were exposed, the time the
// same exchanges take bare (time_bare_shifts; collective: every rank calls it after the call),
// and the bytes it sent.
struct Overlap {
  double exposed_s = 0, bare_s = 0;
  size_t sent_bytes = 0;
};
inline Overlap measure_overlap(dilattn_comm comm) {
  Overlap o;
  o.exposed_s = comm->last_shifts.exposed_s;
  o.sent_bytes = comm->last_shifts.sent_bytes;
  die(dilattn::time_bare_shifts(*comm->transport, comm->last_shifts.exchanges, &o.bare_s), "bare shifts");
  return o;
}

struct Row {
  Config c;
  std::string transport;
  int32_t P = 1;
  double seconds = 0;       // median over repeats of the slowest rank's forward
  double peak_ratio = 0;    // largest rank's peak ring bytes / its shard bytes
  size_t peak_bytes = 0;
  double exposed_s = 0, bare_s = 0;  // summed over ranks, last repeat
  double hidden = -1;                // 1 - exposed / bare (ring_stats.h); -1: no shifts (P = 1)
  // Per rank, last repeat: the bytes it sent (ring_stats.h sent_bytes), and what a ring that
  // sends every K/V row to every other rank would have sent ((P-1) x its K/V shard).
  std::vector<size_t> sent_bytes, all_rows_bytes;
  std::string status = "ok";
};

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

inline std::string machine() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line))
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown";
}

inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one;
  f >> one;
  return one;
}

inline std::string json_row(const Row& r) {
  std::ostringstream s;
  s << "{\"transport\": \"" << r.transport << "\", \"case\": \"" << r.c.name << "\", \"N\": " << r.c.N
    << ", \"P\": " << r.P << ", \"forward_s\": " << r.seconds
    << ", \"peak_ring_bytes\": " << r.peak_bytes << ", \"peak_over_shards\": " << r.peak_ratio
    << ", \"shift_exposed_s\": " << r.exposed_s << ", \"shift_bare_s\": " << r.bare_s
    << ", \"shift_hidden_fraction\": ";
  if (r.hidden < 0) s << "null";
  else s << r.hidden;
  for (const auto& list : {std::make_pair("sent_bytes_per_rank", &r.sent_bytes),
                           std::make_pair("all_rows_bytes_per_rank", &r.all_rows_bytes)}) {
    s << ", \"" << list.first << "\": [";
    for (size_t i = 0; i < list.second->size(); ++i) s << (i ? ", " : "") << (*list.second)[i];
    s << "]";
  }
  s << ", \"status\": \"" << r.status << "\"}";
  return s.str();
}

inline void print_header() {
  std::printf("%-9s %-20s %6s %2s %9s %11s %11s %8s %12s %12s\n", "transport", "case", "N", "P",
              "fwd s", "exposed s", "bare s", "hidden", "peak/shards", "max sent MB");
}
inline void print_row(const Row& r) {
  char hidden[16] = "       -";
  if (r.hidden >= 0) std::snprintf(hidden, sizeof hidden, "%7.0f%%", 100.0 * r.hidden);
  size_t most = 0;
  for (size_t b : r.sent_bytes) most = std::max(most, b);
  std::printf("%-9s %-20s %6lld %2d %9.4f %11.5f %11.5f %s %11.2fx %12.3f %s\n", r.transport.c_str(),
              r.c.name.c_str(), static_cast<long long>(r.c.N), r.P, r.seconds, r.exposed_s,
              r.bare_s, hidden, r.peak_ratio, static_cast<double>(most) / 1e6,
              r.status == "ok" ? "" : r.status.c_str());
}

}  // namespace ringbench

#endif  // DILATTN_BENCH_RING_COMMON_H
