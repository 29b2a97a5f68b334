// ring_bench_mpi.cpp - ring_bench.cpp's measurement over the MPI transport: run under
// `mpirun -n P`, one rank per process (P = the world size), each with the cpu backend and one
// worker. Forward time: the slowest rank's, between two barriers. Peak memory includes the
// transport's staging buffers. Overlap as in ring_bench.cpp (exposed vs bare shifts, summed
// over ranks). Rank 0 prints the rows and writes the JSON (--json FILE).
// Usage: mpirun -n P bench_ring_mpi [--json FILE] [--repeats R] [--quick]
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <chrono>
#include <thread>

#include "ring_bench_common.h"

namespace {

using namespace ringbench;

Row run(const Config& c, int32_t P, int32_t rank, int repeats) {
  Row row;
  row.c = c;
  row.transport = "mpi";
  row.P = P;
  dilattn_plan plan = make_plan(c);
  Shard shard;
  shard.make(c, P, rank);
  MPI_Comm world = MPI_COMM_WORLD;
  std::vector<double> times;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    dilattn_comm comm = nullptr;
    die(dilattn_comm_create_mpi(&world, 600000, &comm), "comm");
    MPI_Barrier(MPI_COMM_WORLD);
    const auto t0 = std::chrono::steady_clock::now();
    const dilattn_status status = shard.forward(plan, comm, c);
    double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int32_t failed = status != DILATTN_SUCCESS ? status : 0;
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT32_T, MPI_MAX, MPI_COMM_WORLD);
    if (failed) row.status = dilattn_status_string(static_cast<dilattn_status>(failed));
    if (rep == repeats && !failed) {
      const Overlap o = measure_overlap(comm);
      size_t peak = 0;
      dilattn_comm_peak_bytes(comm, &peak);
      double ratio = static_cast<double>(peak) / shard.bytes();
      double sums[2] = {o.exposed_s, o.bare_s};
      MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      struct { double ratio; int rank; } mine{ratio, rank}, most{};
      MPI_Allreduce(&mine, &most, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
      unsigned long long peak_of_most = peak;
      MPI_Bcast(&peak_of_most, 1, MPI_UNSIGNED_LONG_LONG, most.rank, MPI_COMM_WORLD);
      // Every rank's bytes sent, and its K/V shard times P-1, gathered on every rank.
      unsigned long long mine_bytes[2] = {o.sent_bytes, static_cast<unsigned long long>(P - 1) * shard.kv_bytes()};
      std::vector<unsigned long long> all(2 * static_cast<size_t>(P));
      MPI_Allgather(mine_bytes, 2, MPI_UNSIGNED_LONG_LONG, all.data(), 2, MPI_UNSIGNED_LONG_LONG,
                    MPI_COMM_WORLD);
      for (int32_t p = 0; p < P; ++p) {
        row.sent_bytes.push_back(static_cast<size_t>(all[2 * static_cast<size_t>(p)]));
        row.all_rows_bytes.push_back(static_cast<size_t>(all[2 * static_cast<size_t>(p) + 1]));
      }
      row.exposed_s = sums[0];
      row.bare_s = sums[1];
      row.peak_ratio = most.ratio;
      row.peak_bytes = static_cast<size_t>(peak_of_most);
    }
    dilattn_comm_destroy(comm);
    if (rep > 0) times.push_back(dt);
  }
  row.seconds = median(times);
  if (P > 1) row.hidden = dilattn::hidden_fraction(row.exposed_s, row.bare_s);
  dilattn_plan_destroy(plan);
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  int rank = 0, P = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  std::string json_path = "ring_bench_mpi.json";
  int repeats = 3;
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--json" && i + 1 < argc) json_path = argv[++i];
    else if (a == "--repeats" && i + 1 < argc) repeats = std::max(1, std::atoi(argv[++i]));
    else if (a == "--quick") quick = true;
    else {
      if (rank == 0) std::fprintf(stderr, "usage: mpirun -n P %s [--json FILE] [--repeats R] [--quick]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  const std::string cpu = machine(), load = load_average();
  const unsigned cores = std::thread::hardware_concurrency();
  if (rank == 0) {
    std::printf("machine: %s, %u logical cores, load average %s at start; MPI ranks %d; cpu "
                "backend ISA %s, 1 worker per rank; B=%lld H=%lld D=%lld f32\n",
                cpu.c_str(), cores, load.c_str(), P, dilattn_cpu_isa(),
                static_cast<long long>(kB), static_cast<long long>(kH), static_cast<long long>(kD));
    print_header();
  }
  std::vector<Row> rows;
  for (const Config& c : configs(quick)) {
    rows.push_back(run(c, P, rank, repeats));
    if (rank == 0) print_row(rows.back());
  }
  if (rank == 0) {
    std::ofstream json(json_path);
    json << "{\"machine\": \"" << cpu << "\", \"logical_cores\": " << cores
         << ", \"load_average_at_start\": " << load << ", \"isa\": \"" << dilattn_cpu_isa()
         << "\", \"repeats\": " << repeats << ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) json << (i ? ", " : "") << json_row(rows[i]);
    json << "]}\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  MPI_Finalize();
  return 0;
}
