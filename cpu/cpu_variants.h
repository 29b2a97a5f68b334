// cpu_variants.h - the SPEC 10 variants in the cpu backend's tiles: sliding windows, softcap,
// ALiBi (10.1), packed batches (10.2) and sinks (10.3).
//
// The plain tile loops (cpu_forward.cpp, cpu_backward.cpp) ask a VariantTiles, built once per
// work item, only where it is active, once per tile, never per score:
//   - cover(): does the window (and, in a packed block-sparse batch, the row's sequence and its
//     causal rule) keep none, all or part of a tile's pairs? A tile it keeps none of is skipped
//     before anything is gathered, so a window costs time in proportion to the pairs it keeps;
//   - cut_rows(): for a partly kept tile, each row's kept keys are a run of the tile's keys,
//     [first[t], allowed[t]); the rest become -inf scores, and the products of the tile are
//     summed row by row over the runs (accumulate_ranges, accumulate_keys_ranges), so a key
//     outside A(i) never meets row i, not even as 0 * NaN (SPEC 13);
//   - transform(): softcap, then ALiBi, on the scaled score of every kept pair (SPEC 10.1),
//     with lib/score_rules.h's arithmetic; the backward keeps the softcap's slope per pair and
//     multiplies dS by it (scale_ds_by_slope).
// The window bounds come from lib/index_rules.h (window_first_key, window_last_key), the
// sequence frames from Problem::frame_of_row. A packed batch of dense or dilated attention runs
// as one problem per sequence (PackedSequences: every rule of SPEC 10.2 is then the plain one
// in the sequence's own positions, and no tile of another sequence is ever visited). A packed
// block-sparse batch keeps the packed tensor (its mask indexes it) with frames looked up per
// row, and causal applied here per sequence rather than by the plain loops.
// A ring's placed sub-problem (SPEC 5.5, problem.h Placement) takes its causal rule, window,
// ALiBi distances and (cpu_dropout.h) dropout draws at the whole problem's positions: the
// bounds of each row are cut in those positions and mapped back to the sub-problem's keys, and
// causal is applied here, not by the plain loops (plain_rules).
// Sinks join each row's softmax once, when the row is finished (join_sink), and their gradient
// is a separate sum over rows in a fixed order (sink_gradients).
// Checked by tests/cpu/test_cpu_variants.cpp against the f64 reference.
#ifndef DILATTN_CPU_VARIANTS_H
#define DILATTN_CPU_VARIANTS_H

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "cpu_isa_target.h"  // first: see there
#include "cpu_microkernel.h"
#include "cpu_pair_weights.h"
#include "cpu_thread_pool.h"
#include "score_rules.h"
#include "sequence_rows.h"
#include "softmax_rules.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

enum class Cover { none, all, part };

// The SPEC 10.1/10.2 options as the tiles of one work item (batch element b, query head h) see
// them. `p` is the problem whose options apply: the plan's own, or one sequence of a packed
// batch (PackedSequences), or, for a packed block-sparse batch, the packed problem itself
// (frames: each row's sequence is looked up).
struct VariantTiles {
  const Problem* p = nullptr;
  int64_t b = 0, h = 0;
  bool active = false;  // some option changes the tiles: the plain loops ask cover() and cut_rows()
  bool scores = false;  // softcap or ALiBi: transform() rewrites the kept scores
  bool frames = false;  // packed block-sparse: rows in several sequences, causal applied here
  double softcap = 0;

  VariantTiles() = default;
  VariantTiles(const Problem& problem, int64_t batch, int64_t head)
      : p(&problem), b(batch), h(head), softcap(problem.softcap) {
    scores = problem.softcap != 0 || !problem.alibi_slopes.empty();
    frames = problem.is_packed();
    active = scores || frames || problem.has_window() || problem.placed;
  }

  SequenceFrame frame(int64_t i) const {
    return frames || p->placed ? p->frame_of_row(b, i) : SequenceFrame{b, 0, 0, p->Nq, p->Nk};
  }
  // The keys row i may see, [*lo, *hi] in the problem's positions (lo > hi: none), by its
  // sequence, the causal rule and the window; without clamping to the sequence they never
  // decrease with i inside a sequence (index_rules.h), which cover() relies on.
  void row_bounds(const SequenceFrame& f, int64_t i, int64_t* lo, int64_t* hi) const {
    if (p->placed) return placed_row_bounds(f, i, lo, hi);
    const int64_t li = i - f.q0;
    int64_t first = max_i64(0, window_first_key(li, f.nq, f.nk, p->window_left));
    int64_t last = min_i64(f.nk - 1, window_last_key(li, f.nq, f.nk, p->window_right));
    if (p->causal) last = min_i64(last, causal_last_key(li, f.nq, f.nk));
    *lo = f.k0 + first;
    *hi = f.k0 + last;
  }

  // row_bounds of a placed sub-problem (SPEC 5.5): the bounds in the whole problem's positions
  // (the frame is the whole problem), then the sub-problem's keys between them, key t sitting
  // at position k_first + k_step t. Both maps never decrease, so neither do the bounds.
  void placed_row_bounds(const SequenceFrame& f, int64_t i, int64_t* lo, int64_t* hi) const {
    const int64_t position = p->row_position(f, i);
    int64_t first = max_i64(0, window_first_key(position, f.nq, f.nk, p->window_left));
    int64_t last = min_i64(f.nk - 1, window_last_key(position, f.nq, f.nk, p->window_right));
    if (p->causal) last = min_i64(last, causal_last_key(position, f.nq, f.nk));
    const KeyProgression keys{p->place.k_first, p->place.k_step, p->Nk};
    *lo = first_term_at_least(keys, first);
    *hi = terms_at_most(keys, last) - 1;
  }

  // Pairs (q term q0 + t, t < rows) x (k term k0 + c, c < kcount): how many of them the window
  // and the sequences keep. Rows of one sequence are judged by the first and the last (their
  // bounds never decrease); rows of several sequences count as part.
  Cover cover(const KeyProgression& q, int64_t q0, int64_t rows, const KeyProgression& k,
              int64_t k0, int64_t kcount) const {
    const int64_t i_first = progression_at(q, q0), i_last = progression_at(q, q0 + rows - 1);
    const int64_t j_first = progression_at(k, k0), j_last = progression_at(k, k0 + kcount - 1);
    const SequenceFrame f = frame(i_first);
    if (frames && frame(i_last).seq != f.seq) return Cover::part;
    int64_t lo_first, hi_first, lo_last, hi_last;
    row_bounds(f, i_first, &lo_first, &hi_first);
    row_bounds(f, i_last, &lo_last, &hi_last);
    if (hi_last < j_first || lo_first > j_last) return Cover::none;
    if (lo_last <= j_first && hi_first >= j_last && lo_first <= hi_first && lo_last <= hi_last)
      return Cover::all;
    return Cover::part;
  }

  // A partly kept S tile (after mask_tile, which set allowed[t] and -inf from there on):
  // first[t] and allowed[t] become row t's run of kept keys, and the scores outside it -inf.
  template <class T>
  void cut_rows(T* S, const KeyProgression& q, int64_t q0, int64_t rows,
                const KeyProgression& k, int64_t k0, int64_t* first, int64_t* allowed) const {
    const T neg_inf = -std::numeric_limits<T>::infinity();
    const KeyProgression tile{progression_at(k, k0), k.step, allowed[0]};
    SequenceFrame f = frame(progression_at(q, q0));
    for (int64_t t = 0; t < rows; ++t) {
      const int64_t i = progression_at(q, q0 + t);
      if (frames && (i < f.q0 || i >= f.q0 + f.nq)) f = frame(i);
      int64_t lo, hi;
      row_bounds(f, i, &lo, &hi);
      KeyProgression keys = tile;
      keys.count = allowed[t];
      const int64_t begin = first_term_at_least(keys, lo);
      const int64_t end = lo > hi ? begin : max_i64(begin, terms_at_most(keys, hi));
      for (int64_t c = 0; c < begin; ++c) S[t * kBC + c] = neg_inf;
      for (int64_t c = end; c < allowed[t]; ++c) S[t * kBC + c] = neg_inf;
      first[t] = begin;
      allowed[t] = end;
    }
  }

  // SPEC 10.1 on the kept scores [first[t], allowed[t]) of an S tile, which hold
  // pre * <q, k> (softmax_rules.h's score scale: s = S * post * ln 2 is scale * <q, k>):
  // S = (softcapped(s) + ALiBi bias) in the same units. slope (backward; may be null): the
  // softcap's derivative at s, for scale_ds_by_slope. A row is worked in f64 a vector at a
  // time (softcap_row; the ALiBi distances as exact f64 integers), all kBC columns, and only
  // the kept ones are written back. Distances are between the positions of Problem::
  // row_position and key_position (a sequence's, or the whole problem's for a placed one).
  template <class T>
  void transform(T* S, const KeyProgression& q, int64_t q0, int64_t rows,
                 const KeyProgression& k, int64_t k0, const int64_t* first,
                 const int64_t* allowed, T post, T* slope) const {
    const double to_scaled = static_cast<double>(post) * kLn2;
    const double to_score = kLog2e / static_cast<double>(post);
    const bool alibi = !p->alibi_slopes.empty();
    const int64_t j0 = progression_at(k, k0);
    const double key_step = static_cast<double>(k.step * (p->placed ? p->place.k_step : 1));
    alignas(64) double x[kBC], x_slope[kBC];
    SequenceFrame f = frame(progression_at(q, q0));
    for (int64_t t = 0; t < rows; ++t) {
      if (first[t] >= allowed[t]) continue;
      const int64_t i = progression_at(q, q0 + t);
      if (frames && (i < f.q0 || i >= f.q0 + f.nq)) f = frame(i);
      for (int c = 0; c < kBC; ++c) x[c] = static_cast<double>(S[t * kBC + c]) * to_scaled;
      if (softcap > 0) softcap_row(x, x_slope, softcap);
      if (alibi) {
        // alibi_bias(m, row position, key position, nq, nk) with the key position of j0 + c
        // growing by key_step: the distance is below Nq + Nk (plan.cpp), so exact in f64.
        const double m = p->alibi_slope(f.seq, h);
        const double at_first_key = static_cast<double>(
            p->row_position(f, i) + (f.nk - f.nq) - p->key_position(f, j0));
        for (int c = 0; c < kBC; ++c)
          x[c] += -m * std::fabs(at_first_key - static_cast<double>(c) * key_step);
      }
      for (int64_t c = first[t]; c < allowed[t]; ++c) {
        S[t * kBC + c] = static_cast<T>(x[c] * to_score);
        if (slope != nullptr) slope[t * kBC + c] = static_cast<T>(softcap > 0 ? x_slope[c] : 1.0);
      }
    }
  }

  // softcapped() and softcap_slope() of lib/score_rules.h on kBC scaled scores in place, a
  // vector at a time: tanh(y) = sign(y) (1 - e) / (1 + e), e = 2^(-2 |y| log2(e)) by exp2v's
  // f64 polynomial (good to f64 rounding, so 1 - e loses nothing f32 or SPEC 12 would see),
  // instead of a libm call per score. An infinite y gives e = 0 and tanh = +-1; a NaN stays
  // NaN (SPEC 13).
  static void softcap_row(double* s, double* slope, double c) {
    typedef vec<double> V;
    typedef ivec<double> I;
    const V cap = splat(c), one = splat(1.0), to_exponent = splat(-2.0 * kLog2e);
    const I sign_bit = I{} + std::numeric_limits<int64_t>::min();  // not splat(-0.0): {} + -0.0 is +0
    for (int n = 0; n < kBC; n += kW<double>) {
      const V y = vload(s + n) / cap;
      const V e = exp2v(vmax_plain(y, -y) * to_exponent);
      const V magnitude = (one - e) / (one + e);
      const V t = (V)((I)magnitude | ((I)y & sign_bit));
      vstore(s + n, cap * t);
      vstore(slope + n, one - t * t);
    }
  }
};

// The problem whose causal rule the plain tile loops apply (cpu_tile_loop.h): p itself, or a
// copy without causal (kept in *storage) where the variant tiles apply causal themselves: a
// packed block-sparse batch (per sequence) and a placed sub-problem (at whole positions).
inline const Problem& plain_rules(const Problem& p, Problem* storage) {
  if (!p.causal || (!p.is_packed() && !p.placed)) return p;
  *storage = p;
  storage->causal = false;
  return *storage;
}

// The variant work of one S tile after mask_tile: cut to the kept runs when the tile is partly
// kept (returns true: some run starts after the tile's first key, so the products must go
// through accumulate_ranges), scores transformed. first[] is set for every row.
template <class T>
inline bool prepare_variant_tile(const VariantTiles& vx, Cover cover, T* S,
                                 const KeyProgression& q, int64_t q0, int64_t rows,
                                 const KeyProgression& k, int64_t k0, int64_t* first,
                                 int64_t* allowed, bool* cut, T post, T* slope) {
  for (int64_t t = 0; t < rows; ++t) first[t] = 0;
  bool starts_late = false;
  if (cover == Cover::part) {
    vx.cut_rows(S, q, q0, rows, k, k0, first, allowed);
    *cut = true;
    for (int64_t t = 0; t < rows; ++t) starts_late |= first[t] > 0;
  }
  if (vx.scores) vx.transform(S, q, q0, rows, k, k0, first, allowed, post, slope);
  return starts_late;
}

// O[t] += sum_{first[t] <= c < allowed[t]} A[t][c] Bm[c], row by row (accumulate_allowed for
// runs that need not start at the tile's first key); pairs of weight 0 left out as there.
template <class T, class Product>
inline void accumulate_ranges(T* O, int64_t ldo, int64_t rows, const Product& product,
                              const int64_t* first, const int64_t* allowed, int64_t width,
                              const PairWeights<T>& pw) {
  for (int64_t t = 0; t < rows; ++t) {
    const T* w = pw.has_zero ? pw.per_pair + t * kBC : nullptr;
    for (int64_t c = first[t]; c < allowed[t];) {
      if (w != nullptr && w[c] == T(0)) { ++c; continue; }
      int64_t e = c + 1;
      while (e < allowed[t] && (w == nullptr || w[e] != T(0))) ++e;
      product.add(O + t * ldo, ldo, t, 1, c, e, width);
      c = e;
    }
  }
}

// The key-side products (accumulate_keys_allowed) for a tile whose runs may start late: while
// every Bm row is finite, one register-blocked call (A is 0 outside the runs); else key by key
// over the runs of rows that see the key.
template <class T, class Product>
inline void accumulate_keys_ranges(T* O, int64_t ldo, int64_t kcount, const Product& product,
                                   int64_t rows, const int64_t* first, const int64_t* allowed,
                                   int64_t width, const PairWeights<T>& pw, bool careful) {
  if (!careful) return product.add(O, ldo, 0, kcount, 0, rows, width);
  accumulate_keys_by_runs(O, ldo, kcount, product, rows, first, allowed, width, pw);
}

// Backward, after probabilities_and_ds (which zeroed P and dS from allowed[t] on): P and dS
// zeroed before first[t] too, and, with a softcap, dS multiplied by the slope of each kept pair
// (SPEC 10.1: dS_raw = dS (1 - tanh^2)); pairs of weight 0 keep their 0.
template <class T>
inline void finish_variant_ds(T* S, T* dS, int64_t rows, const int64_t* first,
                              const int64_t* allowed, const T* slope, const PairWeights<T>& pw) {
  for (int64_t t = 0; t < rows; ++t) {
    const int64_t begin = min_i64(first[t], kBC);
    for (int64_t c = 0; c < begin; ++c) S[t * kBC + c] = dS[t * kBC + c] = 0;
    if (slope == nullptr) continue;
    for (int64_t c = first[t]; c < allowed[t]; ++c)
      if (!(pw.has_zero && pw.per_pair[t * kBC + c] == T(0)))
        dS[t * kBC + c] *= slope[t * kBC + c];
  }
}

// ---------------------------------------------------------------- SPEC 10.3: sinks
// The sink logit sigma joins a finished row's running (m, l) as one more term with no value:
// returns the factor the row's O accumulator is multiplied by (besides 1 / l). sigma = -inf
// (no sink) leaves the row as it is. A row with no key gets m = the sink, l = 1 and factor 0:
// O = 0, LSE = sigma.
template <class T>
inline T join_sink(T* m, T* l, double sigma, T post) {
  if (sigma == -std::numeric_limits<double>::infinity()) return T(1);
  const T s = static_cast<T>(sigma * kLog2e / static_cast<double>(post));  // the score domain
  const T m_new = max_nan(*m, s);
  const T alpha = online_rescale(*m, m_new, post);
  *l = *l * alpha + online_prob(s, online_shift(m_new), post);
  *m = m_new;
  return alpha;
}

// d sigma_h = - sum_{b, i: LSE_i != -inf} exp(sigma_h - LSE_i) <dO_i, O_i> (SPEC 10.3), in f64
// from the tensors' values, one head per work item and its rows in order (b, then i): the same
// bits for any thread count, and the reference's own order.
inline void sink_gradients(const Problem& p, const BackwardArgs& a, const ThreadPool& pool) {
  pool.run(p.H, [&](int64_t h, int) {
    double sum = 0;
    const double sigma = a.sinks.values[h];
    for (int64_t b = 0; b < p.B; ++b)
      for (int64_t i = 0; i < p.Nq; ++i) {
        const double lse =
            load_element(a.lse->data, a.lse->dtype, element_offset(*a.lse, b, h, i, 0));
        if (row_is_empty(lse)) continue;
        const int64_t o_at = element_offset(*a.o, b, i, h, 0);
        const int64_t do_at = element_offset(*a.d_o, b, i, h, 0);
        double D_i = 0;
        for (int64_t d = 0; d < p.D; ++d)
          D_i += load_element(a.d_o->data, a.d_o->dtype, do_at + d * a.d_o->strides[3]) *
                 load_element(a.o->data, a.o->dtype, o_at + d * a.o->strides[3]);
        sum -= std::exp(sigma - lse) * D_i;
      }
    a.sinks.d_values[h] = sum;
  });
}

// ---------------------------------------------------------------- SPEC 10.2: packed batches
// A packed batch of dense or dilated attention as one problem per non-empty sequence: B = 1,
// its own Nq and Nk, its ALiBi slopes as H per-head ones, no packing; tensors are views of the
// sequence's rows. Work items number (sequence, head, block) in that order.
struct PackedSequences {
  std::vector<Problem> problems;
  std::vector<int64_t> q0, k0;
  std::vector<int64_t> items_before;  // prefix sums of each sequence's work items

  // blocks_of(sequence problem) = the blocks of rows its items cover; heads = H or Hkv.
  template <class Blocks>
  PackedSequences(const Problem& p, int64_t heads, Blocks&& blocks_of) {
    items_before.push_back(0);
    for (int64_t s = 0; s < p.num_seqs(); ++s) {
      const size_t z = static_cast<size_t>(s);
      Problem one = p.sequence_problem(s);  // its frames and dropout draws name it (Problem)
      if (one.Nq == 0 && one.Nk == 0) continue;
      if (!p.alibi_slopes.empty()) {  // the sequence's H slopes, read per head by the tiles
        one.alibi_slopes.resize(static_cast<size_t>(p.H));
        for (int64_t h = 0; h < p.H; ++h)
          one.alibi_slopes[static_cast<size_t>(h)] = p.alibi_slope(s, h);
      }
      const int64_t items = heads * blocks_of(one);
      if (items == 0) continue;
      problems.push_back(std::move(one));
      q0.push_back(p.cu_seqlens_q[z]);
      k0.push_back(p.cu_seqlens_k[z]);
      items_before.push_back(items_before.back() + items);
    }
  }
  int64_t items() const { return items_before.back(); }
  // Work item -> (sequence index, item within the sequence).
  size_t sequence_of(int64_t item, int64_t* local) const {
    const size_t s = static_cast<size_t>(
        std::upper_bound(items_before.begin(), items_before.end(), item) - items_before.begin() - 1);
    *local = item - items_before[s];
    return s;
  }
};

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS

#endif  // DILATTN_CPU_VARIANTS_H
