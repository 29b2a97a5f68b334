// handles.h - what the opaque handles of dilattn.h point to.
//
// Each handle starts with a magic number, cleared on destroy, so a handle used after destroy is
// caught where the memory has not been reused yet (a best effort, not a guarantee).
#ifndef DILATTN_HANDLES_H
#define DILATTN_HANDLES_H

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.h"
#include "problem.h"

struct dilattn_desc_s {
  static constexpr uint32_t kMagic = 0xd1a7de5cu;
  uint32_t magic = kMagic;
  dilattn_kind kind = DILATTN_KIND_DENSE;
  std::vector<dilattn::Branch> branches;
  int32_t head_mode = dilattn::kHeadsMod;
  std::shared_ptr<const dilattn::BsrMask> mask;
  bool causal = false;
  bool has_scale = false;
  double scale = 0;
  int32_t num_threads = 0;
  dilattn_pool pool = nullptr;
};

struct dilattn_mask_s {
  static constexpr uint32_t kMagic = 0xd1a7a5cbu;
  uint32_t magic = kMagic;
  std::shared_ptr<const dilattn::BsrMask> mask;
};

struct dilattn_plan_s {
  static constexpr uint32_t kMagic = 0xd1a7b1a0u;
  uint32_t magic = kMagic;
  dilattn::Problem problem;
  const dilattn::Backend* backend = nullptr;  // the table entry of problem.backend
  dilattn::WorkspaceBytes workspace;
};

namespace dilattn {
// Returns SUCCESS when h is a live handle of its kind, else NULL_POINTER / INVALID_VALUE with
// the last error naming `what`.
template <class Handle>
dilattn_status check_handle(const Handle* h, const char* what);
}  // namespace dilattn

#endif  // DILATTN_HANDLES_H
