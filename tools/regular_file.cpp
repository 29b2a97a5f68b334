// regular_file.cpp - see regular_file.h. stat() first (no open of a non-regular file), then
// open(O_NONBLOCK) and fstat() again: a path swapped for a FIFO between the two calls is then
// opened without blocking and still refused, and the size read is that of the file opened.
#include "regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "cli_error.h"

namespace dilattn_cli {

namespace {

const char* kind_of(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a plain file";
}

void require_regular(const std::string& path, const struct stat& st) {
  if (!S_ISREG(st.st_mode))
    fail_input(path + ": not a regular file (" + kind_of(st.st_mode) + "); inputs are read only "
               "from regular files");
}

}  // namespace

RegularFile::RegularFile(const std::string& path) : path_(path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0)
    fail_input(path + ": cannot open for reading: " + std::strerror(errno));
  require_regular(path, st);
  fd_ = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd_ < 0) fail_input(path + ": cannot open for reading: " + std::strerror(errno));
  if (fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd_);
    fd_ = -1;
    fail_input(path + ": not a regular file (it changed while being opened)");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RegularFile::~RegularFile() {
  if (fd_ >= 0) close(fd_);
}

std::vector<unsigned char> RegularFile::read(uint64_t offset, uint64_t count) const {
  if (offset > size_ || count > size_ - offset || count > std::numeric_limits<size_t>::max())
    fail_input(path_ + ": read past the end of the file");
  std::vector<unsigned char> bytes(static_cast<size_t>(count));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = pread(fd_, bytes.data() + done, bytes.size() - done,
                            static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_input(path_ + ": read error: " + std::strerror(errno));
    if (n == 0) fail_input(path_ + ": the file shrank while being read");
    done += static_cast<size_t>(n);
  }
  return bytes;
}

std::vector<unsigned char> read_regular_file(const std::string& path) {
  const RegularFile f(path);
  return f.read(0, f.size());
}

}  // namespace dilattn_cli
