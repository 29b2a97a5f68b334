// dilattn_cli.cpp - the `dilattn` command line: subcommand dispatch and the usage text.
//
// Subcommands live in cmd_*.cpp and use only the public C ABI (dilattn.h), like any user
// program. Every failure is a CliError caught here: one line "dilattn <cmd>: <message>" on
// stderr and the exit code of cli_error.h; no output file is written (output_files.h).
// Checked by tests/cli/ (test_cli_*.py).
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "cli_error.h"
#include "commands.h"
#include "flags.h"

namespace {

const char kUsage[] =
    "usage: dilattn <command> [flags]\n"
    "\n"
    "commands:\n"
    "  forward  --q Q.npy --k K.npy --v V.npy --out O.npy [--lse L.npy] [attention flags]\n"
    "      O = attention(Q, K, V). Arrays are .npy, C order, [B, N, H, D] (K, V: [B, Nk, Hkv, D]),\n"
    "      dtype <f4, <f8 or <f2, all three the same. O has Q's dtype. LSE is [B, H, Nq],\n"
    "      <f8 when the plan runs on ref, else <f4.\n"
    "  backward --q --k --v --do dO.npy --dq DQ.npy --dk DK.npy --dv DV.npy\n"
    "           [--o O.npy --lse L.npy] [--d-sinks DS.npy] [attention flags]\n"
    "      Gradients (SPEC 6). With --o and --lse (the forward's outputs, given together) they are\n"
    "      used as is; without them the forward runs first to recompute them.\n"
    "  compare  A.npy B.npy [--atol X --rtol Y]\n"
    "      Prints max abs and rel error; B is the reference. A finite element fails where\n"
    "      |a-b| > atol + rtol*|b|; an infinity matches only the same infinity, NaN only NaN;\n"
    "      integer arrays are compared exactly (and only with integer arrays).\n"
    "      Defaults atol=1e-5 rtol=1e-4 (SPEC 8, f32).\n"
    "  mask     (--pattern P | --mask IN.npz) --n N [--n-k NK] --block-size B [--block-size-k BK]\n"
    "           --out M.npz\n"
    "      Writes the block-sparse mask a pattern builds, or IN.npz checked and normalised,\n"
    "      as int64 row_ptr, col_idx[, head_ptr] (N, NK: query and key lengths).\n"
    "  info     Version, backends built and available, CUDA/NCCL found, CPU features.\n"
    "\n"
    "attention flags:\n"
    "  --segments 2048,4096 --dilations 1,2   dilated attention (LongNet); without them: dense\n"
    "  --heads-mode mod|block|groups          head offsets of dilated attention (default mod)\n"
    "  --mask M.npz                           block-sparse, BSR arrays row_ptr, col_idx and\n"
    "                                         optional head_ptr (per-head), int32 or int64\n"
    "  --pattern P                            block-sparse from a pattern, e.g.\n"
    "                                         local:2+sink:1+strided:4+random:0.05:seed=7\n"
    "  --block-size B [--block-size-k BK]     mask block sizes (default 64; BK defaults to B)\n"
    "  --causal                               causal, aligned bottom-right\n"
    "  --scale X                              softmax scale (default 1/sqrt(D))\n"
    "  --dropout P --seed S [--offset O]      attention dropout with probability P in [0, 1)\n"
    "                                         (SPEC 11; backends cpu, ref), mask fixed by seed S\n"
    "                                         (0 .. 2^64-1) and offset O (0 .. 2^32-1, default 0);\n"
    "                                         backward needs the forward's P, S and O\n"
    "  --window L,R                           sliding window: keys i+d-L .. i+d+R, -1 unbounded\n"
    "  --softcap C                            scores C*tanh(s/C) (0: off)\n"
    "  --alibi-slopes S.npy|m0,m1,...         ALiBi, H slopes or B*H ([B][H]); window, softcap\n"
    "                                         and ALiBi run on backends ref and cpu\n"
    "  --cu-seqlens-q A --cu-seqlens-k B      packed batch (SPEC 10.2): n+1 offsets each, a .npy\n"
    "                                         (<i4/<i8) or a comma list; Q, K, V are [1, total,\n"
    "                                         H, D]; each sequence attends within itself\n"
    "  --sinks S.npy|s0,s1,...                attention sinks (SPEC 10.3): H logits, finite or\n"
    "                                         -inf; backward --d-sinks DS.npy writes d(sink)\n"
    "  --backend ref|cpu|cuda|emu|auto        default auto\n"
    "  --no-progress                          no progress line: on a terminal, a call running\n"
    "                                         over a second shows one on stderr, and Ctrl-C\n"
    "                                         stops the call (exit 130, no output written)\n"
    "  --progress-after S                     draw that line once a call has run S seconds\n"
    "                                         (default 1)\n"
    "  --threads N                            cpu backend worker threads\n"
    "  --ring-threads P                       ring attention (SPEC 5) on P threads, each rank\n"
    "                                         holding its own rows (on the GPU for cuda); needs\n"
    "                                         seqlen_q == seqlen_k\n"
    "  --ring mpi                             ring attention with one rank per MPI process, under\n"
    "                                         mpirun -n P: rank 0 reads the inputs, scatters the\n"
    "                                         rows, gathers and writes the outputs; CPU backends\n"
    "                                         (ref, cpu, emu)\n"
    "  --ring-split contiguous|zigzag         rows per rank (default contiguous; zigzag balances\n"
    "                                         causal work)\n"
    "  --ring-timeout S                       seconds a rank waits for another (default 600);\n"
    "                                         under --ring mpi every rank needs the same command\n"
    "                                         and flags (else exit 2 naming the rank and flag)\n"
    "\n"
    "exit codes: 0 ok; 1 compare out of tolerance; 2 bad input or usage (malformed .npy/.npz,\n"
    "wrong dtype, shape mismatch, missing, unknown or bad flag); 3 backend or runtime failure\n"
    "(backend or device not built, unsupported input, out of memory, CUDA error); 130 Ctrl-C\n"
    "stopped a call.\n"
    "On any error one line naming the file or flag goes to stderr and no output file is written.\n"
    "\n"
    "files: inputs are read only from regular files (not directories, FIFOs or devices).\n"
    "Outputs are written to temporaries and renamed into place together once all are complete;\n"
    "an output that is the same file as another output or an input, or an existing output that\n"
    "is read-only, a directory or not a regular file, is refused (exit 2) before any work.\n";

bool host_is_little_endian() {
  const uint32_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dilattn_cli;
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitBadInput;
  }
  const std::string command = argv[1];
  if (command == "help" || command == "--help" || command == "-h") {
    std::fputs(kUsage, stdout);
    return kExitOk;
  }
  try {
    if (!host_is_little_endian())
      throw CliError(kExitRuntime, "this host is big-endian; .npy I/O here assumes little-endian");
    if (command == "forward") return cmd_forward(argc, argv, 2);
    if (command == "backward") return cmd_backward(argc, argv, 2);
    if (command == "compare") return cmd_compare(argc, argv, 2);
    if (command == "mask") return cmd_mask(argc, argv, 2);
    if (command == "info") return cmd_info(argc, argv, 2);
    fail_input("unknown command '" + command + "' (forward, backward, compare, mask, info; --help)");
  } catch (const QuietExit&) {
    return kExitOk;
  } catch (const HelpRequested&) {
    std::fputs(kUsage, stdout);
    return kExitOk;
  } catch (const CliError& e) {
    std::fprintf(stderr, "dilattn %s: %s\n", command.c_str(), e.what());
    return e.code();
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "dilattn %s: out of memory\n", command.c_str());
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dilattn %s: internal error: %s\n", command.c_str(), e.what());
    return kExitRuntime;
  }
}
