// cli_error.h - the one error type of the dilattn command line, and its exit codes.
//
// Every failure inside the tool becomes a CliError; main() prints its message as one line on
// stderr and exits with its code. Exceptions never cross the C ABI: the library returns
// statuses, and only the tool's own C++ throws. Checked by tests/cli/ (test_cli_*.py).
#ifndef DILATTN_TOOLS_CLI_ERROR_H
#define DILATTN_TOOLS_CLI_ERROR_H

#include <stdexcept>
#include <string>

namespace dilattn_cli {

// Exit codes, documented in `dilattn --help`.
enum ExitCode : int {
  kExitOk = 0,
  kExitOutOfTolerance = 1,  // `compare` found an element outside atol + rtol * |ref|
  kExitBadInput = 2,        // usage, malformed file, bad flag value, a library bad-input status
  kExitRuntime = 3,         // backend or runtime failure: BACKEND_NOT_BUILT, DEVICE_NOT_BUILT, ...
  kExitInterrupted = 130,   // Ctrl-C stopped a call (progress_line.h), as a shell reports SIGINT
};

// `text` with every control byte (below 0x20, and 0x7f) written as \xHH: a NUL would end the
// message main() prints as a C string, a newline would split its one line. Bytes from 0x80 on
// (UTF-8 in paths) stay as they are.
inline std::string printable(const std::string& text) {
  static const char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
      continue;
    }
    out += "\\x";
    out += hex[u >> 4];
    out += hex[u & 0xf];
  }
  return out;
}

// Its message is printable() as given: file contents (a member name, a .npy descr) and paths
// reach it unfiltered.
class CliError : public std::runtime_error {
 public:
  CliError(int code, const std::string& message)
      : std::runtime_error(printable(message)), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// A rank of `--ring mpi` other than 0 stopping because of a failure that rank 0 reports:
// main() prints nothing and exits 0, so that the one message and mpirun's exit status come from
// rank 0 (a non-zero exit elsewhere lets mpirun kill rank 0 before it prints). ring_mpi.h.
struct QuietExit {};

// A bad-input error (exit 2): the message names the file or flag and the problem.
[[noreturn]] inline void fail_input(const std::string& message) {
  throw CliError(kExitBadInput, message);
}

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_CLI_ERROR_H
