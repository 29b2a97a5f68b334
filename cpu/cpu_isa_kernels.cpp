// cpu_isa_kernels.cpp - the IsaKernels table of one target (cpu_isa.h): compiled once per
// target with cpu_forward.cpp and cpu_backward.cpp (cpu/meson.build), it names that
// compilation's entry points. Constant-initialised data only: no code of the target runs
// before cpu_isa_dispatch.cpp has checked the CPU has its instructions.
// Checked by tests/cpu/test_cpu_isa.cpp.
#include "cpu_isa_target.h"
#include "cpu_dropout.h"
#include "cpu_microkernel.h"
#include "cpu_pair_dot.h"
#include "cpu_tile_loop.h"
#include "cpu_workspace.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

dilattn_status forward(const Problem& p, const ForwardArgs& a);    // cpu_forward.cpp
dilattn_status backward(const Problem& p, const BackwardArgs& a);  // cpu_backward.cpp

namespace {
// exp2v over an array, a vector at a time (the tail through a zero-padded vector).
template <class T>
void exp2_array(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kW<T>) {
    T in[kW<T>] = {}, out[kW<T>];
    std::memcpy(in, x + i, sizeof(T) * static_cast<size_t>(min_i64(kW<T>, n - i)));
    vstore(out, exp2v(vload(in)));
    std::memcpy(y + i, out, sizeof(T) * static_cast<size_t>(min_i64(kW<T>, n - i)));
  }
}

// The keep bits of a DropoutTileQuery, through the tiles' own code (cpu_dropout.h).
void dropout_keep_bits_of(const DropoutTileQuery& query, uint64_t* keep) {
  Problem p;  // without a packed batch a row's frame is (b, i, j) itself
  p.B = query.b + 1;
  p.H = query.H;
  p.dropout_p = query.p;
  DropoutCall call;
  call.seed = query.seed;
  call.offset = query.offset;
  const KeyProgression rows{query.i0, query.row_step, query.rows};
  const KeyProgression keys{query.j0, query.key_step, query.kcount};
  const TileDropout d = tile_dropout(p, call);
  if (query.product_steps <= 0) {
    dropout_keep_bits(d, p, query.b, query.h, rows, 0, query.rows, keys, 0, query.kcount, keep);
    return;
  }
  // As scores_tile runs TileDraws: register blocks of kMR rows, then the rest; a product whose
  // steps do nothing (the schedule, not the product, is under test).
  TileDraws draws(d, p, query.b, query.h, rows, 0, keys, 0, query.kcount, keep);
  int64_t steps_run = 0;
  const auto step = [&](int64_t) { ++steps_run; };
  for (int64_t r = 0; r < query.rows; r += kMR)
    draws.block(r, static_cast<int>(min_i64(kMR, query.rows - r)), query.product_steps, step);
  if (steps_run != query.product_steps * ceil_div(query.rows, kMR))
    for (int64_t t = 0; t < query.rows; ++t) keep[t] = ~uint64_t{0};  // a step lost: all wrong
}
// pair_dot over arrays, a vector at a time (the tail through zero-padded vectors).
void pair_dot_array(const float* acc, const uint32_t* a, const uint32_t* b, float* out,
                    int64_t n) {
  for (int64_t i = 0; i < n; i += kWords) {
    const size_t m = static_cast<size_t>(min_i64(kWords, n - i));
    float sum[kWords] = {}, result[kWords];
    uint32_t x[kWords] = {}, y[kWords] = {};
    std::memcpy(sum, acc + i, sizeof(float) * m);
    std::memcpy(x, a + i, sizeof(uint32_t) * m);
    std::memcpy(y, b + i, sizeof(uint32_t) * m);
    vstore(result, pair_dot(vload(sum), load_words(x), load_words(y)));
    std::memcpy(out + i, result, sizeof(float) * m);
  }
}
// round_word_pairs and round_in_order over arrays, 2 kWords values at a time (the tail through
// zero-padded vectors).
void round_words_array(const float* low, const float* high, uint32_t* across, uint32_t* in_order,
                       int64_t n) {
  for (int64_t i = 0; i < n; i += 2 * kWords) {
    const size_t m = static_cast<size_t>(min_i64(2 * kWords, n - i));
    float x[2 * kWords] = {}, y[2 * kWords] = {};
    uint32_t words[2 * kWords];
    std::memcpy(x, low + i, sizeof(float) * m);
    std::memcpy(y, high + i, sizeof(float) * m);
    store_words(words, round_word_pairs(vload(x), vload(y)));
    store_words(words + kWords, round_word_pairs(vload(x + kWords), vload(y + kWords)));
    std::memcpy(across + i, words, sizeof(uint32_t) * m);
    round_in_order(vload(x), vload(x + kWords), words);
    std::memcpy(in_order + i / 2, words, sizeof(uint32_t) * (m / 2));
  }
}
}  // namespace

extern const IsaKernels kKernels = {DILATTN_CPU_ISA_NAME, DILATTN_CPU_REQUIRED, kVecBytes,
                                    workspace_sizes,      forward,              backward,
                                    exp2_array<float>,    exp2_array<double>,   dropout_keep_bits_of,
                                    kPairDot ? pair_dot_array : nullptr,
                                    kPairDot ? round_words_array : nullptr};

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS
