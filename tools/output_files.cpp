// output_files.cpp - each temporary is "<target>.tmp.<pid>.<n>" in the target's directory (so
// rename() is atomic on one file system), created with O_CREAT | O_EXCL and mode 0666 (the
// umask applies, as for any new file), written and closed with every error checked. The promise
// is "no partial or stray file after an error", not durability across power loss, so no fsync.
// See output_files.h. Checked by tests/cli/test_cli.py.
#include "output_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "cli_error.h"

namespace dilattn_cli {

OutputFiles::~OutputFiles() {
  for (const Entry& e : entries_)
    if (!e.temp.empty()) std::remove(e.temp.c_str());
}

size_t OutputFiles::reserve(const std::string& flag, const std::string& path) {
  for (const Entry& e : entries_)
    if (e.path == path) fail_input("flag --" + flag + ": " + path + " is also given to --" + e.flag);
  std::string temp;
  for (int attempt = 0;; ++attempt) {
    temp = path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(attempt);
    const int fd = open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0666);
    if (fd >= 0) {
      close(fd);
      break;
    }
    if (errno != EEXIST || attempt > 100)
      fail_input("flag --" + flag + ": cannot create a file next to " + path + ": " +
                 std::strerror(errno));
  }
  entries_.push_back({flag, path, temp, false});
  return entries_.size() - 1;
}

void OutputFiles::write(size_t index, const std::vector<unsigned char>& bytes) {
  Entry& e = entries_.at(index);
  std::FILE* f = std::fopen(e.temp.c_str(), "wb");
  bool ok = f != nullptr;
  if (ok && !bytes.empty()) ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (!ok) throw CliError(kExitRuntime, e.path + ": write failed (--" + e.flag + ")");
  e.written = true;
}

void OutputFiles::commit() {
  for (const Entry& e : entries_)
    if (!e.written) throw CliError(kExitRuntime, e.path + ": internal error, output never written");
  for (Entry& e : entries_) {
    if (std::rename(e.temp.c_str(), e.path.c_str()) != 0)
      throw CliError(kExitRuntime, e.path + ": cannot rename the finished output into place: " +
                                       std::strerror(errno));
    e.temp.clear();
  }
}

}  // namespace dilattn_cli
