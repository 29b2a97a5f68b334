// handles.h - what the opaque handles of dilattn.h point to.
//
// Each handle's first member registers it as live (handle_registry.h) until it is destroyed, so
// a destroyed, forged or wrong-kind handle is refused without reading the memory it points to.
#ifndef DILATTN_HANDLES_H
#define DILATTN_HANDLES_H

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"
#include "handle_registry.h"
#include "problem.h"

struct dilattn_desc_s {
  static constexpr dilattn::HandleKind kKind = dilattn::HandleKind::desc;
  dilattn::LiveHandle live{this, kKind};
  dilattn_kind kind = DILATTN_KIND_DENSE;
  std::vector<dilattn::Branch> branches;
  int32_t head_mode = dilattn::kHeadsMod;
  std::shared_ptr<const dilattn::BsrMask> mask;
  bool causal = false;
  bool has_scale = false;
  double scale = 0;
  double dropout_p = 0;
  int32_t num_threads = 0;
  dilattn_pool pool = nullptr;
  // SPEC 10.1 variants, copied into the plan's Problem.
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;
  // SPEC 10.2: num_seqs + 1 offsets each, or both empty (no packed batch).
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
  bool sinks = false;  // SPEC 10.3: values per call
};

struct dilattn_mask_s {
  static constexpr dilattn::HandleKind kKind = dilattn::HandleKind::mask;
  dilattn::LiveHandle live{this, kKind};
  std::shared_ptr<const dilattn::BsrMask> mask;
};

struct dilattn_plan_s {
  static constexpr dilattn::HandleKind kKind = dilattn::HandleKind::plan;
  dilattn::LiveHandle live{this, kKind};
  dilattn::Problem problem;
  const dilattn::Backend* backend = nullptr;  // the table entry of problem.backend
  dilattn::WorkspaceBytes workspace;
};

namespace dilattn {
// Returns SUCCESS when h is a live handle of its kind, else NULL_POINTER / INVALID_VALUE with
// the last error naming `what`. Reads only the registry, never *h.
template <class Handle>
dilattn_status check_handle(const Handle* h, const char* what) {
  return check_live(h, Handle::kKind, what);
}
// For *_destroy: check_handle and unregister in one step; on SUCCESS the caller deletes h.
template <class Handle>
dilattn_status release_handle(const Handle* h, const char* what) {
  return release_live(h, Handle::kKind, what);
}
}  // namespace dilattn

#endif  // DILATTN_HANDLES_H
