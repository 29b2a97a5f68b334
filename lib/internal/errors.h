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

// The status a C ABI entry point returns: a success leaves an empty last error (SPEC 7), even
// when the call met an error on the way and recovered (AUTO trying cuda, a builder calling
// another), so no caller ever reads a stale message after DILATTN_SUCCESS.
inline dilattn_status finish_call(dilattn_status status) {
  if (status == DILATTN_SUCCESS) clear_error();
  return status;
}

}  // namespace dilattn

// Runs the body of a C ABI entry point, which returns a dilattn_status: clears the last error,
// runs the body as a lambda so every return passes through finish_call (a success clears what
// the body set), and converts any escaping C++ exception into a status (nothing throws across
// the ABI). Every entry point that returns a status uses these two macros.
#define DILATTN_ABI_BEGIN                                \
  try {                                                  \
    ::dilattn::clear_error();                            \
    return ::dilattn::finish_call([&]() -> dilattn_status {
#define DILATTN_ABI_END                                                                    \
    }());                                                                                  \
  }                                                                                        \
  catch (const std::bad_alloc&) {                                                          \
    return ::dilattn::set_error(DILATTN_ERROR_OUT_OF_MEMORY, "out of host memory");        \
  }                                                                                        \
  catch (...) {                                                                            \
    return ::dilattn::set_error(DILATTN_ERROR_INTERNAL, "unexpected C++ exception");       \
  }

#endif  // DILATTN_ERRORS_H
