// check.h - the one way a C++ test records a check: a pass or a failure, the failure printed
// with file:line and the case being checked, and a final "N passed, M failed" line whose
// outcome is main's exit status.
//
//   CHECK(cond)                      cond holds
//   CHECK_MSG(cond, fmt, ...)        cond holds; a failure prints the printf-style message
//   CHECK_EQ(got, want)              got == want (integers, statuses, pointers, doubles)
//   CHECK_NEAR(got, want, tol)       |got - want| <= tol; infinities must match exactly, NaN fails
//   CHECK_OK(call)                   call returned DILATTN_SUCCESS (else: status, last error)
//   CHECK_ERROR(call, want, "a", ..) call returned `want` and dilattn_last_error() names every
//                                    one of "a", ... (SPEC 7: the argument and the value)
//   harness::CaseScope scope(name)   failures until the end of the scope name this case
//   return harness::finish("name");  prints the totals; 1 when any check failed or none ran
//
// Every macro evaluates its arguments once and returns whether the check passed, so a test
// may skip work that depends on it. The counters are atomic (checks may run on several
// threads); only the first kMaxPrinted failures are printed in full.
#ifndef DILATTN_TESTS_CHECK_H
#define DILATTN_TESTS_CHECK_H

#include <atomic>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <utility>

#include "dilattn.h"

namespace harness {

constexpr int64_t kMaxPrinted = 30;

inline std::atomic<int64_t>& passed_count() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline std::atomic<int64_t>& failed_count() {
  static std::atomic<int64_t> n{0};
  return n;
}
inline int64_t failures() { return failed_count().load(); }

// The case under check on this thread, printed with each failure ("" when none).
inline std::string& current_case() {
  thread_local std::string name;
  return name;
}

class CaseScope {
 public:
  explicit CaseScope(std::string name) : saved_(std::move(current_case())) {
    current_case() = std::move(name);
  }
  ~CaseScope() { current_case() = std::move(saved_); }
  CaseScope(const CaseScope&) = delete;
  CaseScope& operator=(const CaseScope&) = delete;

 private:
  std::string saved_;
};

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
inline bool record(bool ok, const char* file, int line, const char* format, ...) {
  if (ok) {
    ++passed_count();
    return true;
  }
  const int64_t n = ++failed_count();
  if (n <= kMaxPrinted) {
    char message[1024];
    va_list args;
    va_start(args, format);
    std::vsnprintf(message, sizeof message, format, args);
    va_end(args);
    const std::string& name = current_case();
    std::fprintf(stderr, "%s:%d: FAILED%s%s%s: %s\n", file, line, name.empty() ? "" : " [",
                 name.c_str(), name.empty() ? "" : "]", message);
  } else if (n == kMaxPrinted + 1) {
    std::fprintf(stderr, "(further failures are counted, not printed)\n");
  }
  return false;
}

// A value as text for CHECK_EQ's message.
inline std::string text_of(dilattn_status s) { return dilattn_status_string(s); }
inline std::string text_of(bool b) { return b ? "true" : "false"; }
inline std::string text_of(const void* p) {
  char t[32];
  std::snprintf(t, sizeof t, "%p", p);
  return t;
}
template <class T>
std::string text_of(const T& x) {
  char t[64];
  if constexpr (std::is_floating_point<T>::value) {
    std::snprintf(t, sizeof t, "%.17g", static_cast<double>(x));
  } else if constexpr (std::is_enum<T>::value) {
    std::snprintf(t, sizeof t, "%lld", static_cast<long long>(x));
  } else if constexpr (std::is_signed<T>::value) {
    std::snprintf(t, sizeof t, "%lld", static_cast<long long>(x));
  } else {
    std::snprintf(t, sizeof t, "%llu", static_cast<unsigned long long>(x));
  }
  return t;
}

template <class A, class B>
bool check_eq(const A& got, const B& want, const char* got_text, const char* want_text,
              const char* file, int line) {
  if (got == want) return record(true, file, line, "%s", "");
  const char* last_error = dilattn_last_error();  // often why a value is not the one expected
  return record(false, file, line, "%s = %s, want %s = %s%s%s%s", got_text,
                text_of(got).c_str(), want_text, text_of(want).c_str(),
                last_error[0] ? " (last error: " : "", last_error, last_error[0] ? ")" : "");
}

inline bool check_near(double got, double want, double tol, const char* got_text,
                       const char* file, int line) {
  const bool ok = (std::isinf(want) || std::isinf(got)) ? got == want
                                                       : std::fabs(got - want) <= tol;
  return record(ok, file, line, "%s = %.17g, want %.17g (tol %g)", got_text, got, want, tol);
}

inline bool check_ok(dilattn_status s, const char* call, const char* file, int line) {
  return record(s == DILATTN_SUCCESS, file, line, "%s -> %s (%s)", call, dilattn_status_string(s),
                dilattn_last_error());
}

// The status, then each needle in the message: one check each, as SPEC 7 asks for both.
inline bool check_error(dilattn_status got, dilattn_status want,
                        std::initializer_list<const char*> needles, const char* call,
                        const char* file, int line) {
  const std::string message = dilattn_last_error();
  std::printf("  %s: \"%s\"\n", dilattn_status_string(got), message.c_str());
  bool ok = record(got == want, file, line, "%s: status %s, want %s", call,
                   dilattn_status_string(got), dilattn_status_string(want));
  for (const char* needle : needles)
    ok = record(message.find(needle) != std::string::npos, file, line,
                "%s: message \"%s\" does not name \"%s\"", call, message.c_str(), needle) && ok;
  return ok;
}

// The totals, and main's exit status: 1 when a check failed, or when none ran at all (a test
// whose checks were all skipped proves nothing).
inline int finish(const char* name) {
  const int64_t passed = passed_count().load(), failed = failed_count().load();
  std::printf("%s: %" PRId64 " passed, %" PRId64 " failed\n", name, passed, failed);
  return (failed != 0 || passed == 0) ? 1 : 0;
}

// meson reads exit status 77 as "skipped", which is neither a pass nor a failure.
inline int skip(const char* why) {
  std::printf("SKIP: %s\n", why);
  return 77;
}

}  // namespace harness

#define CHECK(cond) ::harness::record(static_cast<bool>(cond), __FILE__, __LINE__, "%s", #cond)
#define CHECK_MSG(cond, ...) \
  ::harness::record(static_cast<bool>(cond), __FILE__, __LINE__, __VA_ARGS__)
#define CHECK_EQ(got, want) ::harness::check_eq((got), (want), #got, #want, __FILE__, __LINE__)
#define CHECK_NEAR(got, want, tol) \
  ::harness::check_near((got), (want), (tol), #got, __FILE__, __LINE__)
#define CHECK_OK(call) ::harness::check_ok((call), #call, __FILE__, __LINE__)
#define CHECK_ERROR(call, want, ...) \
  ::harness::check_error((call), (want), {__VA_ARGS__}, #call, __FILE__, __LINE__)

#endif  // DILATTN_TESTS_CHECK_H
