// ring_bench.cpp - ring attention (SPEC 5) on the threads transport: forward time, each rank's
// peak ring memory and how much of the shift time the compute hides, against the number of
// ranks P, for the configurations of ring_bench_common.h. ring_bench_mpi.cpp measures the same
// over MPI; bench/ring/run_ring_bench.py runs both and writes one table and one JSON.
//
// Every rank is one thread running the cpu backend with one worker, so P ranks use P threads
// (on a machine with fewer cores the ranks share them: the time then shows the ring's overhead
// on a fixed amount of CPU, not a speed-up). Peak memory is dilattn_comm_peak_bytes: what the
// ring held beyond the caller's shards (chunks in flight, partial and running O, workspaces),
// printed against the rank's shard bytes (Q, K, V, O, LSE). Overlap (lib/ring/ring_stats.h):
// the time the ranks spent inside exchange_begin + exchange_end during the call (exposed) against
// the time the same exchanges take with no compute (bare); hidden = 1 - exposed / bare, over all
// ranks. Bytes sent per rank (the ring sends only the rows a rank needs, lib/ring/ring_needs.h)
// beside what sending every K/V row to every rank would cost.
// Median of --repeats runs after one warm-up. Table for people, JSON (--json FILE) for scripts;
// both name the machine and its load.
// Usage: bench_ring [--json FILE] [--repeats R] [--quick] [--ranks 1,2,3,4]
#include <chrono>
#include <thread>

#include "ring_bench_common.h"

namespace {

using namespace ringbench;

Row run(const Config& c, int32_t P, int repeats) {
  Row row;
  row.c = c;
  row.transport = "threads";
  row.P = P;
  dilattn_plan plan = make_plan(c);
  std::vector<Shard> shards(static_cast<size_t>(P));
  for (int32_t p = 0; p < P; ++p) shards[static_cast<size_t>(p)].make(c, P, p);
  std::vector<double> times;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    std::vector<dilattn_comm> comms(static_cast<size_t>(P));
    die(dilattn_comm_create_threads(P, 600000, comms.data()), "comm");
    std::vector<dilattn_status> status(static_cast<size_t>(P), DILATTN_SUCCESS);
    std::vector<Overlap> overlap(static_cast<size_t>(P));
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::thread> ranks;
    for (int32_t p = 0; p < P; ++p)
      ranks.emplace_back([&, p] {
        status[static_cast<size_t>(p)] =
            shards[static_cast<size_t>(p)].forward(plan, comms[static_cast<size_t>(p)], c);
      });
    for (std::thread& t : ranks) t.join();
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (rep == repeats) {  // the bare shifts of the last call, every rank at once
      ranks.clear();
      for (int32_t p = 0; p < P; ++p)
        ranks.emplace_back([&, p] {
          overlap[static_cast<size_t>(p)] = measure_overlap(comms[static_cast<size_t>(p)]);
        });
      for (std::thread& t : ranks) t.join();
    }
    for (int32_t p = 0; p < P; ++p) {
      if (status[static_cast<size_t>(p)] != DILATTN_SUCCESS)
        row.status = dilattn_status_string(status[static_cast<size_t>(p)]);
      if (rep != repeats) continue;
      size_t peak = 0;
      dilattn_comm_peak_bytes(comms[static_cast<size_t>(p)], &peak);
      const double ratio = static_cast<double>(peak) / shards[static_cast<size_t>(p)].bytes();
      if (ratio > row.peak_ratio) {
        row.peak_ratio = ratio;
        row.peak_bytes = peak;
      }
      row.sent_bytes.push_back(overlap[static_cast<size_t>(p)].sent_bytes);
      row.all_rows_bytes.push_back(static_cast<size_t>(P - 1) * shards[static_cast<size_t>(p)].kv_bytes());
      row.exposed_s += overlap[static_cast<size_t>(p)].exposed_s;
      row.bare_s += overlap[static_cast<size_t>(p)].bare_s;
    }
    for (dilattn_comm comm : comms) dilattn_comm_destroy(comm);
    if (rep > 0) times.push_back(dt);
  }
  row.seconds = median(times);
  if (P > 1) row.hidden = dilattn::hidden_fraction(row.exposed_s, row.bare_s);
  dilattn_plan_destroy(plan);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path = "ring_bench.json";
  int repeats = 3;
  bool quick = false;
  std::vector<int32_t> ranks = {1, 2, 3, 4};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") quick = true;
    else if (a == "--ranks" && i + 1 < argc) {
      ranks.clear();
      std::stringstream list(argv[++i]);
      for (std::string p; std::getline(list, p, ',');) ranks.push_back(std::max(1, std::atoi(p.c_str())));
    } else {
      std::fprintf(stderr, "usage: %s [--json FILE] [--repeats R] [--quick] [--ranks 1,2,3,4]\n", argv[0]);
      return 2;
    }
  }
  const std::string cpu = machine(), load = load_average();
  const unsigned cores = std::thread::hardware_concurrency();
  std::printf("machine: %s, %u logical cores, load average %s at start; cpu backend ISA %s, "
              "1 worker per rank; B=%lld H=%lld D=%lld f32\n",
              cpu.c_str(), cores, load.c_str(), dilattn_cpu_isa(), static_cast<long long>(kB),
              static_cast<long long>(kH), static_cast<long long>(kD));
  print_header();
  std::vector<Row> rows;
  for (const Config& c : configs(quick))
    for (int32_t P : ranks) {
      rows.push_back(run(c, P, repeats));
      print_row(rows.back());
    }
  std::ofstream json(json_path);
  json << "{\"machine\": \"" << cpu << "\", \"logical_cores\": " << cores
       << ", \"load_average_at_start\": " << load << ", \"isa\": \"" << dilattn_cpu_isa()
       << "\", \"repeats\": " << repeats << ", \"rows\": [";
  for (size_t i = 0; i < rows.size(); ++i) json << (i ? ", " : "") << json_row(rows[i]);
  json << "]}\n";
  std::printf("wrote %s\n", json_path.c_str());
  return 0;
}
