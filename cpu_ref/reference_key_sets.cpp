// reference_key_sets.cpp - A(i) as softmax groups of key progressions (SPEC 2, 3, 4), cut to the
// sliding window of SPEC 10.1, within the row's own sequence of a packed batch (SPEC 10.2); for a
// ring's placed sub-problem (SPEC 5.5), cut by the whole problem's causal rule and window.
#include "reference_key_sets.h"

#include "placement_rules.h"

namespace dilattn::ref {

namespace {

// SPEC 10.1: the window intersects the kind's keys (positions before dilation); without one,
// kp as it is. kp and li are in the sequence's positions (SPEC 10.2).
KeyProgression in_window(const Problem& p, const SequenceFrame& f, int64_t li,
                         const KeyProgression& kp) {
  if (!p.has_window()) return kp;
  return window_cut(kp, li, f.nq, f.nk, p.window_left, p.window_right);
}

// SPEC 4 and 10.2: the keys of listed block jb for packed row i, as sequence positions. The
// block indexes the packed tensor; its keys outside the row's sequence go, then causal cuts in
// the sequence's own alignment (block_keys_at, as the kernels read a sequence's blocks).
// Without packing this is block_keys as SPEC 4 writes it.
KeyProgression sequence_block_keys(const Problem& p, const SequenceFrame& f, int64_t i,
                                   int64_t jb) {
  if (!p.is_packed()) return block_keys(i, jb, p.mask->bk, p.Nq, p.Nk, p.causal);
  return block_keys_at(i - f.q0, jb, p.mask->bk, f.k0, f.nq, f.nk, p.causal);
}

// SPEC 5: a placed ring sub-problem (dense or block-sparse): its keys by the kind, cut by the
// whole problem's causal rule and window at the row's and keys' positions.
void placed_key_groups(const Problem& p, int64_t h, int64_t i, std::vector<KeyGroup>* groups) {
  const Placement& at = p.place;
  const int64_t position = placed_position(at.q_first, at.q_step, i);
  auto cut = [&](const KeyProgression& kp) {
    return placed_key_cut(kp, at.k_first, at.k_step, position, at.Nq, at.Nk, p.causal,
                          p.window_left, p.window_right);
  };
  KeyGroup group;
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    int64_t count = 0;
    const int64_t* cols = p.mask->row_cols(h, i / p.mask->bq, &count);
    for (int64_t e = 0; e < count; ++e) {
      const KeyProgression kp = cut(block_keys(i, cols[e], p.mask->bk, p.Nq, p.Nk, false));
      if (kp.count > 0) group.push_back(kp);
    }
  } else {
    const KeyProgression kp = cut(KeyProgression{0, 1, p.Nk});
    if (kp.count > 0) group.push_back(kp);
  }
  if (!group.empty()) groups->push_back(std::move(group));
}

}  // namespace

void row_key_groups(const Problem& p, int64_t h, int64_t i, std::vector<KeyGroup>* groups) {
  groups->clear();
  if (p.placed) return placed_key_groups(p, h, i, groups);
  // The index rules run in the sequence's positions (the whole batch element without packing);
  // the keys found move back to the packed tensor's positions.
  const SequenceFrame f = p.frame_of_row(0, i);
  const int64_t li = i - f.q0;
  auto packed = [&](const KeyProgression& kp) { return shifted(in_window(p, f, li, kp), f.k0); };
  switch (p.kind) {
    case DILATTN_KIND_DENSE: {  // SPEC 2
      const KeyProgression kp = packed(dense_keys(li, f.nq, f.nk, p.causal));
      if (kp.count > 0) groups->push_back({kp});
      return;
    }
    case DILATTN_KIND_DILATED: {  // SPEC 3: one group per branch that selects row i
      const int64_t m = p.num_branches();
      for (int64_t branch_index = 0; branch_index < m; ++branch_index) {
        if (!head_uses_branch(p.head_mode, h, branch_index, p.H, m)) continue;
        const Branch& branch = p.branches[static_cast<size_t>(branch_index)];
        const int64_t o = head_offset(p.head_mode, h, branch_index, branch.r, p.H);
        // Every sequence is square here (plan.cpp), so nq is its N.
        const KeyProgression kp =
            packed(dilated_keys(li, f.nq, branch.w, branch.r, o, p.causal));
        if (kp.count > 0) groups->push_back({kp});
      }
      return;
    }
    case DILATTN_KIND_BLOCK_SPARSE: {  // SPEC 4: every key of every listed block, one softmax
      int64_t count = 0;
      const int64_t* cols = p.mask->row_cols(h, i / p.mask->bq, &count);
      KeyGroup group;
      for (int64_t e = 0; e < count; ++e) {
        const KeyProgression kp = packed(sequence_block_keys(p, f, i, cols[e]));
        if (kp.count > 0) group.push_back(kp);
      }
      if (!group.empty()) groups->push_back(std::move(group));
      return;
    }
  }
}

int64_t score_count(const Problem& p) {
  int64_t per_batch = 0, total = 0;
  std::vector<KeyGroup> groups;
  for (int64_t h = 0; h < p.H; ++h)
    for (int64_t i = 0; i < p.Nq; ++i) {
      row_key_groups(p, h, i, &groups);
      for (const KeyGroup& group : groups)
        for (const KeyProgression& kp : group)
          if (__builtin_add_overflow(per_batch, kp.count, &per_batch)) return -1;
    }
  return __builtin_mul_overflow(per_batch, p.B, &total) ? -1 : total;
}

}  // namespace dilattn::ref
