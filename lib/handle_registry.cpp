// handle_registry.cpp - the registry of live desc, mask and plan handles (SPEC 7).
#include "handle_registry.h"

#include <algorithm>
#include <array>
#include <mutex>
#include <unordered_map>

#include "errors.h"

namespace dilattn {

namespace {

struct Registry {
  std::mutex mu;
  std::unordered_map<const void*, HandleKind> live;
  // The last destroyed addresses, only to say "destroyed already" instead of "not a handle".
  std::array<const void*, 1024> destroyed{};
  size_t next_destroyed = 0;
};

// Never destroyed: handles freed by static destructors at exit must still find it.
Registry& registry() {
  static Registry* r = new Registry;
  return *r;
}

const char* kind_name(HandleKind kind) {
  switch (kind) {
    case HandleKind::desc: return "desc";
    case HandleKind::mask: return "mask";
    case HandleKind::plan: return "plan";
    case HandleKind::comm: return "comm";
  }
  return "handle";
}

// With r.mu held: SUCCESS, or the error for an address that is not a live `kind`.
dilattn_status check_locked(const Registry& r, const void* address, HandleKind kind,
                            const char* what) {
  const auto it = r.live.find(address);
  if (it != r.live.end() && it->second == kind) return DILATTN_SUCCESS;
  if (it != r.live.end())
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s' = %p is a %s handle, not a %s",
                     what, address, kind_name(it->second), kind_name(kind));
  if (std::find(r.destroyed.begin(), r.destroyed.end(), address) != r.destroyed.end())
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s' = %p: %s destroyed already",
                     what, address, kind_name(kind));
  return set_error(DILATTN_ERROR_INVALID_VALUE,
                   "argument '%s' = %p is not a %s handle (never created, or destroyed long ago)",
                   what, address, kind_name(kind));
}

}  // namespace

LiveHandle::LiveHandle(const void* address, HandleKind kind) : address_(address) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.live[address] = kind;
  // A new handle at a recently destroyed address is live again.
  std::replace(r.destroyed.begin(), r.destroyed.end(), address, static_cast<const void*>(nullptr));
}

LiveHandle::~LiveHandle() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.live.erase(address_) == 0) return;  // release_live already recorded it
  r.destroyed[r.next_destroyed] = address_;
  r.next_destroyed = (r.next_destroyed + 1) % r.destroyed.size();
}

dilattn_status check_live(const void* address, HandleKind kind, const char* what) {
  if (address == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s' is NULL", what);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return check_locked(r, address, kind, what);
}

dilattn_status release_live(const void* address, HandleKind kind, const char* what) {
  if (address == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument '%s' is NULL", what);
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  if (dilattn_status s = check_locked(r, address, kind, what)) return s;
  r.live.erase(address);
  r.destroyed[r.next_destroyed] = address;
  r.next_destroyed = (r.next_destroyed + 1) % r.destroyed.size();
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
