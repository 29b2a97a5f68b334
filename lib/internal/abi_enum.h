// abi_enum.h - reading a C enum that crosses the ABI as the integer the caller passed (SPEC 7).
//
// In C an enum is an int and any int may be passed (dilattn_head_mode 99, dilattn_dtype -1). In
// C++ an enum without a fixed underlying type holds only the values of its enumerators' bit
// range; loading anything else is undefined behaviour (-fsanitize=enum reports it, and the
// optimiser may drop the range check that would have caught it). So every enum argument or
// field from a caller is first read through enum_value, which copies its bytes into an int32
// (the C ABI's representation), checked, and only then used as the enum.
#ifndef DILATTN_ABI_ENUM_H
#define DILATTN_ABI_ENUM_H

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace dilattn {

template <class Enum>
int32_t enum_value(const Enum& e) {
  static_assert(std::is_enum<Enum>::value && sizeof(Enum) == sizeof(int32_t),
                "a C ABI enum is an int");
  int32_t raw;
  std::memcpy(&raw, &e, sizeof raw);  // the bytes, not a load of the enum type
  return raw;
}

}  // namespace dilattn

#endif  // DILATTN_ABI_ENUM_H
