// progress_line.h - the command line's progress on a long call (SPEC 14.11): one line on stderr,
// redrawn in place, and Ctrl-C stopping the call.
//
// Active only when stderr is a terminal (never in a pipe, a file or a CI log) and --no-progress
// is absent, and only for the single-device calls (the ring's calls take no callback). The line
// appears once a call has run for a second (--progress-after S: S seconds), so a short call
// prints nothing, and is erased when the call ends. While it is active, SIGINT asks the library to stop the call instead of killing
// the process: the call returns DILATTN_ERROR_CANCELLED, the tool exits 130 (as a shell reports a
// SIGINT) and writes no output file. A second Ctrl-C kills as usual.
// Checked by tests/cli/test_cli_progress.py (through a pseudo-terminal).
#ifndef DILATTN_TOOLS_PROGRESS_LINE_H
#define DILATTN_TOOLS_PROGRESS_LINE_H

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "dilattn.h"

namespace dilattn_cli {

class ProgressLine {
 public:
  // label names the call on the line ("forward", "backward"); quiet_seconds: how long a call
  // runs before the line appears.
  ProgressLine(const char* label, bool wanted, double quiet_seconds);
  ~ProgressLine();
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Points options' progress fields at this line when it is active; returns whether it did.
  bool attach(dilattn_call_options* options);

 private:
  static int callback(void* user, int64_t done, int64_t total);
  void draw(int64_t done, int64_t total);
  void erase();

  std::string label_;
  double quiet_seconds_;
  bool active_ = false;
  bool drawn_ = false;
  bool started_ = false;
  std::chrono::steady_clock::time_point start_;
  struct sigaction previous_sigint_ {};
};

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_PROGRESS_LINE_H
