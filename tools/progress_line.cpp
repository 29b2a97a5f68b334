// progress_line.cpp - see progress_line.h.
#include "progress_line.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace dilattn_cli {

namespace {

// Set by SIGINT while a line is active; the callback turns it into a cancel.
volatile sig_atomic_t g_interrupted = 0;

extern "C" void note_interrupt(int) { g_interrupted = 1; }

// write(2) of the whole text; a terminal that refuses it loses a redraw, nothing else.
void write_stderr(const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, p, left);
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

ProgressLine::ProgressLine(const char* label, bool wanted, double quiet_seconds)
    : label_(label), quiet_seconds_(quiet_seconds) {
  active_ = wanted && isatty(STDERR_FILENO) == 1;
  if (!active_) return;
  g_interrupted = 0;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = note_interrupt;
  sa.sa_flags = SA_RESETHAND;  // a second Ctrl-C takes the default action: the process ends
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, nullptr, &previous_sigint_);
  // A SIGINT the caller ignores (a background job) stays ignored.
  if (previous_sigint_.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
}

ProgressLine::~ProgressLine() {
  if (!active_) return;
  erase();
  if (previous_sigint_.sa_handler != SIG_IGN) sigaction(SIGINT, &previous_sigint_, nullptr);
}

bool ProgressLine::attach(dilattn_call_options* options) {
  if (!active_) return false;
  options->progress = callback;
  options->progress_user = this;
  return true;
}

int ProgressLine::callback(void* user, int64_t done, int64_t total) {
  auto* line = static_cast<ProgressLine*>(user);
  if (done >= total) {
    line->erase();  // the last call: the outputs are written
    return 0;
  }
  line->draw(done, total);
  return g_interrupted ? 1 : 0;
}

void ProgressLine::draw(int64_t done, int64_t total) {
  const auto now = std::chrono::steady_clock::now();
  if (!started_) {
    started_ = true;
    start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < quiet_seconds_) return;  // a short call prints nothing
  const double fraction = static_cast<double>(done) / static_cast<double>(total);
  char text[160];
  if (fraction > 0.01) {
    const double left = elapsed / fraction - elapsed;
    std::snprintf(text, sizeof text, "\rdilattn %s: %3.0f%%  %.0f s, about %.0f s left%s",
                  label_.c_str(), 100 * fraction, elapsed, left,
                  g_interrupted ? " (stopping)" : "");
  } else {
    std::snprintf(text, sizeof text, "\rdilattn %s: %3.0f%%  %.0f s%s", label_.c_str(),
                  100 * fraction, elapsed, g_interrupted ? " (stopping)" : "");
  }
  write_stderr(std::string(text) + "\x1b[K");  // clear what a longer line left
  drawn_ = true;
}

void ProgressLine::erase() {
  if (!drawn_) return;
  write_stderr("\r\x1b[K");
  drawn_ = false;
}

}  // namespace dilattn_cli
