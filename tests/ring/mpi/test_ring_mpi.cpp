// test_ring_mpi.cpp - ring attention over the MPI transport, run under mpirun with P processes
// (meson: P = 1..4): the checks of the threads tests on P = the world size.
//   ring_mpi_matches_reference: every case of ring_cases(), both splits, forward and backward,
//     against the reference with the bounds of test_ring_forward.cpp / test_ring_backward.cpp
//     (f64 on ref: 1e-12 / 1e-11; f32 on cpu: SPEC 8).
//   ring_mpi_options_match_single_process: ring_checks.h check_option_cases (a window, softcap,
//     ALiBi, sinks with d_sinks, dropout, alone and together) on P = the world size, on ref and
//     on cpu (placed sub-problems, SPEC 5.5; SPEC 12's f64 bound).
//   ring_mpi_bitwise_equals_threads: O, LSE, dQ, dK, dV bitwise equal to the threads
//     transport's for the same ring: both transports run the same algorithm in the same order.
//   ring_mpi_chunks_in_pieces: the same with every shift cut into 1000-byte messages (the path
//     chunks above INT_MAX bytes take), bitwise equal again.
#include "../ring_checks.h"
#include "mpi_ranks.h"

using namespace harness;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) { return a.bytes() == b.bytes(); }

void check_bitwise_equals_threads(const ringtest::RankHost& host, const char* what) {
  CaseScope scope(what);
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  for (const AttentionCase& c : ringtest::ring_cases(DILATTN_F32))
    for (ringtest::Ring ring : ringtest::rings(P, P, DILATTN_BACKEND_CPU)) {
      if (!ringtest::ring_supports(c, ring.P)) continue;
      const Inputs in = make_inputs(c, 17, 2.0);
      const Forward threads = ringtest::ring_forward(c, in, ring);
      const Gradients threads_g = ringtest::ring_backward(c, in, threads, ring);
      ring.host = &host;
      const Forward mpi = ringtest::ring_forward(c, in, ring);
      const Gradients mpi_g = ringtest::ring_backward(c, in, threads, ring);
      CaseScope named(ringtest::label(c, ring));
      CHECK_MSG(same_bits(mpi.o, threads.o), "O differs in bits from the threads transport");
      CHECK_MSG(same_bits(mpi.lse, threads.lse), "LSE differs in bits from the threads transport");
      CHECK_MSG(same_bits(mpi_g.dq, threads_g.dq), "dQ differs in bits from the threads transport");
      CHECK_MSG(same_bits(mpi_g.dk, threads_g.dk), "dK differs in bits from the threads transport");
      CHECK_MSG(same_bits(mpi_g.dv, threads_g.dv), "dV differs in bits from the threads transport");
    }
}

}  // namespace

int main(int argc, char** argv) {
  ringtest::MpiSession mpi(&argc, &argv);
  const ringtest::MpiRanks world;
  const int32_t P = mpi.size();
  ringtest::check_forward_cases(DILATTN_F64, ringtest::rings(P, P, DILATTN_BACKEND_REF, &world),
                                {1e-13, 1e-12}, {1e-12, 0});
  ringtest::check_forward_cases(DILATTN_F32, ringtest::rings(P, P, DILATTN_BACKEND_CPU, &world),
                                spec8::of(DILATTN_F32), spec8::lse());
  ringtest::check_backward_cases(DILATTN_F64, ringtest::rings(P, P, DILATTN_BACKEND_REF, &world),
                                 {1e-11, 1e-11});
  ringtest::check_backward_cases(DILATTN_F32, ringtest::rings(P, P, DILATTN_BACKEND_CPU, &world),
                                 spec8::of(DILATTN_F32));
  ringtest::check_option_cases(ringtest::rings(P, P, DILATTN_BACKEND_REF, &world));
  ringtest::check_option_cases(ringtest::rings(P, P, DILATTN_BACKEND_CPU, &world),
                              ringtest::spec12_bounds());
  check_bitwise_equals_threads(world, "ring_mpi_bitwise_equals_threads");
  const ringtest::MpiRanks pieces(1000);
  check_bitwise_equals_threads(pieces, "ring_mpi_chunks_in_pieces");
  const std::string name = "ring_mpi_matches_reference rank " + std::to_string(mpi.rank()) +
                           " of " + std::to_string(P);
  return finish(name.c_str());
}
