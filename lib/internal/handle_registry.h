// handle_registry.h - which desc, mask and plan handles are live (SPEC 7).
//
// A handle is valid only while it is registered: its struct registers itself on construction
// (a LiveHandle member) and the registry forgets it on destroy, so a destroyed, forged or
// wrong-kind handle is refused by looking its address up, never by reading the memory it points
// to (which may be freed). The same scheme as the pool registry in buddy_pool.cpp, for the three
// other handle kinds. One mutex guards the registry; using a handle while another thread
// destroys it remains the caller's race, as with free().
#ifndef DILATTN_HANDLE_REGISTRY_H
#define DILATTN_HANDLE_REGISTRY_H

#include "dilattn.h"

namespace dilattn {

enum class HandleKind { desc, mask, plan, comm };  // comm: dilattn_ring.h

// Registers `address` as a live handle of `kind` for the lifetime of the object that holds it
// (the first member of dilattn_desc_s, dilattn_mask_s, dilattn_plan_s), so every way a handle
// is made or freed keeps the registry right. Not copyable: a copy would be a second handle.
class LiveHandle {
 public:
  LiveHandle(const void* address, HandleKind kind);
  ~LiveHandle();
  LiveHandle(const LiveHandle&) = delete;
  LiveHandle& operator=(const LiveHandle&) = delete;

 private:
  const void* address_;
};

// SUCCESS when `address` is a live handle of `kind`; else NULL_POINTER (NULL) or INVALID_VALUE
// with the last error naming `what` and saying whether it was destroyed, is another kind, or
// was never a handle.
dilattn_status check_live(const void* address, HandleKind kind, const char* what);

// For *_destroy: checks like check_live and, on success, unregisters `address` in the same
// locked step, so two threads destroying one handle cannot both succeed. The caller then
// deletes the object.
dilattn_status release_live(const void* address, HandleKind kind, const char* what);

}  // namespace dilattn

#endif  // DILATTN_HANDLE_REGISTRY_H
