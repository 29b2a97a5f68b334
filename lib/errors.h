// errors.h - setting the thread-local last-error message (SPEC 7).
//
// Every failing entry point returns set_error(status, "argument 'x' = value: problem"), so a
// status always travels with a message naming the argument and the value.
#ifndef DILATTN_ERRORS_H
#define DILATTN_ERRORS_H

#include "dilattn.h"

namespace dilattn {

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
dilattn_status set_error(dilattn_status status, const char* format, ...);
void clear_error();

}  // namespace dilattn

// Runs the body of a C ABI entry point: clears the last error, converts any escaping C++
// exception into a status (nothing throws across the ABI).
#define DILATTN_ABI_BEGIN \
  try {                   \
    ::dilattn::clear_error();
#define DILATTN_ABI_END                                                                    \
  }                                                                                        \
  catch (const std::bad_alloc&) {                                                          \
    return ::dilattn::set_error(DILATTN_ERROR_OUT_OF_MEMORY, "out of host memory");        \
  }                                                                                        \
  catch (...) {                                                                            \
    return ::dilattn::set_error(DILATTN_ERROR_INTERNAL, "unexpected C++ exception");       \
  }

#endif  // DILATTN_ERRORS_H
