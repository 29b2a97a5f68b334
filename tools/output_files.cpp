// output_files.cpp - see output_files.h. A temporary is "<dir>/.dilattn-<pid>-<n>.tmp" next to
// its target (so rename() is atomic on one file system), created with O_CREAT | O_EXCL and mode
// 0666 (the umask applies, as for any new file) or the existing target's permission bits, written
// and closed with every error checked. The promise is "no partial or stray file after an error",
// not durability across power loss, so no fsync.
//
// Signals: the temporaries' paths also live in a fixed table of C strings; the handler for SIGINT,
// SIGTERM and SIGHUP only reads that table and calls unlink(), then re-raises the signal with its
// default action (unlink, sigaction-reset and raise are async-signal-safe; nothing allocates).
// A slot is filled before its file is created and marked free only after the file is gone or
// renamed, so no temporary exists unlisted.
#include "output_files.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cli_error.h"

namespace dilattn_cli {

namespace {

// ---------------------------------------------------------------- the signal handler's table

constexpr int kSlots = 16;          // the tool writes at most 3 outputs
constexpr size_t kSlotPath = 4096;  // PATH_MAX on Linux; a longer temporary path is refused
char g_temp_path[kSlots][kSlotPath];
volatile sig_atomic_t g_temp_live[kSlots];

void unlink_live_temporaries() {
  for (int i = 0; i < kSlots; ++i)
    if (g_temp_live[i]) unlink(g_temp_path[i]);
}

extern "C" void remove_temporaries_and_die(int sig) {
  unlink_live_temporaries();
  // SA_RESETHAND restored the default action; the signal is blocked until we return, then kills.
  raise(sig);
}

void install_handler_once() {
  static bool installed = false;
  if (installed) return;
  installed = true;
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = remove_temporaries_and_die;
  sa.sa_flags = SA_RESETHAND;
  sigemptyset(&sa.sa_mask);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&sa.sa_mask, s);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old;
    // A signal the caller ignores (nohup, a background job's SIGINT) stays ignored.
    if (sigaction(s, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    sigaction(s, &sa, nullptr);
  }
}

int claim_slot(const std::string& path) {
  if (path.size() >= kSlotPath) return -1;
  for (int i = 0; i < kSlots; ++i) {
    if (g_temp_live[i]) continue;
    std::memcpy(g_temp_path[i], path.c_str(), path.size() + 1);
    std::atomic_signal_fence(std::memory_order_seq_cst);  // the path is complete before it is live
    g_temp_live[i] = 1;
    return i;
  }
  return -1;
}

void release_slot(int slot) {
  if (slot >= 0) g_temp_live[slot] = 0;
}

// ---------------------------------------------------------------- paths as files

void split_path(const std::string& path, std::string* dir, std::string* name) {
  const size_t slash = path.rfind('/');
  *dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  *name = slash == std::string::npos ? path : path.substr(slash + 1);
}

OutputFiles::Identity identify(const std::string& path) {
  OutputFiles::Identity id;
  std::string dir, name;
  split_path(path, &dir, &name);
  char resolved[PATH_MAX];
  id.entry = realpath(dir.c_str(), resolved) != nullptr ? std::string(resolved) + "/" + name : path;
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  return id;
}

bool same_file(const OutputFiles::Identity& a, const OutputFiles::Identity& b) {
  return a.entry == b.entry || (a.exists && b.exists && a.dev == b.dev && a.ino == b.ino);
}

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

// An existing target must be a writable regular file; returns its permission bits (or -1 when
// there is no target yet).
int check_target(const std::string& flag, const std::string& path) {
  std::string dir, name;
  split_path(path, &dir, &name);
  if (name.empty() || name == "." || name == "..")
    fail_input("flag --" + flag + ": " + path + " is a directory, not a file name");
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return -1;
    fail_input("flag --" + flag + ": cannot check " + path + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) fail_input("flag --" + flag + ": " + path + " is a directory");
  if (!S_ISREG(st.st_mode))
    fail_input("flag --" + flag + ": " + path + " exists and is not a regular file (" +
               kind_of(st.st_mode) + ")");
  // The mode bits as well as access(): root passes access() on a file nobody may write.
  if ((st.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 || access(path.c_str(), W_OK) != 0)
    fail_input("flag --" + flag + ": " + path + " exists and is read-only; it is kept (remove it "
               "or make it writable to replace it)");
  return static_cast<int>(st.st_mode & 07777);
}

}  // namespace

void remove_temporaries_now() { unlink_live_temporaries(); }

OutputFiles::~OutputFiles() {
  for (Entry& e : entries_) {
    if (e.fd >= 0) close(e.fd);
    if (!e.temp.empty()) unlink(e.temp.c_str());
    release_slot(e.slot);
  }
}

void OutputFiles::refuse_alias(const std::string& flag, const std::string& path,
                               const Identity& id, bool with_inputs) const {
  for (const Entry& e : entries_)
    if (same_file(id, e.target.id))
      fail_input("flag --" + flag + ": " + path + " is the same file as --" + e.target.flag + "'s " +
                 e.target.path);
  if (!with_inputs) return;  // two inputs may well be one file
  for (const Named& in : inputs_)
    if (same_file(id, in.id))
      fail_input("flag --" + flag + ": " + path + " is the same file as --" + in.flag + "'s " +
                 in.path);
}

void OutputFiles::note_input(const std::string& flag, const std::string& path) {
  const Identity id = identify(path);
  refuse_alias(flag, path, id, false);  // an output reserved earlier
  inputs_.push_back({flag, path, id});
}

size_t OutputFiles::reserve(const std::string& flag, const std::string& path) {
  const int mode = check_target(flag, path);
  std::string dir, name;
  split_path(path, &dir, &name);
  char resolved[PATH_MAX];
  if (realpath(dir.c_str(), resolved) == nullptr)
    fail_input("flag --" + flag + ": directory of " + path + ": " + std::strerror(errno));
  const Identity id = identify(path);
  refuse_alias(flag, path, id, true);

  install_handler_once();
  static unsigned counter = 0;
  Entry e;
  e.target = {flag, path, id};
  for (int attempt = 0;; ++attempt) {
    e.temp = (dir == "/" ? "" : dir) + "/.dilattn-" + std::to_string(getpid()) + "-" +
             std::to_string(counter++) + ".tmp";
    e.slot = claim_slot(e.temp);
    if (e.slot < 0) fail_input("flag --" + flag + ": the path of " + path + " is too long");
    e.fd = open(e.temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (e.fd >= 0) break;
    const int err = errno;
    release_slot(e.slot);
    if (err != EEXIST || attempt > 100)
      fail_input("flag --" + flag + ": cannot create a file next to " + path + ": " +
                 std::strerror(err));
  }
  entries_.push_back(e);  // from here the destructor removes it
  if (mode >= 0 && fchmod(e.fd, static_cast<mode_t>(mode)) != 0)
    fail_input("flag --" + flag + ": cannot give the new " + path + " the old one's mode: " +
               std::strerror(errno));
  return entries_.size() - 1;
}

void OutputFiles::write(size_t index, const std::vector<unsigned char>& bytes) {
  Entry& e = entries_.at(index);
  size_t done = 0;
  bool ok = e.fd >= 0;
  while (ok && done < bytes.size()) {
    const ssize_t n = ::write(e.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) ok = false;
    else done += static_cast<size_t>(n);
  }
  const int err = errno;
  if (e.fd >= 0 && close(e.fd) != 0) ok = false;
  e.fd = -1;
  if (!ok)
    throw CliError(kExitRuntime, e.target.path + ": write failed (--" + e.target.flag + "): " +
                                     std::strerror(err));
  e.written = true;
}

void OutputFiles::commit() {
  // Every temporary is complete, and every target is re-checked (one may have become a
  // directory since reserve()), before the first rename: a failure here replaces nothing.
  for (const Entry& e : entries_) {
    if (!e.written)
      throw CliError(kExitRuntime, e.target.path + ": internal error, output never written");
    check_target(e.target.flag, e.target.path);
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    if (std::rename(e.temp.c_str(), e.target.path.c_str()) != 0) {
      // Only a race with another process gets here; say what was already replaced.
      std::string done;
      for (size_t j = 0; j < i; ++j) done += " " + entries_[j].target.path;
      throw CliError(kExitRuntime, e.target.path + ": cannot rename the finished output into "
                                   "place: " + std::strerror(errno) +
                                   (done.empty() ? "" : "; already replaced:" + done));
    }
    e.temp.clear();
    release_slot(e.slot);
    e.slot = -1;
  }
}

}  // namespace dilattn_cli
