// regular_file.h - the tool's only way to read an input file: regular files only.
//
// A directory, device (/dev/zero), FIFO or socket given as an input is a CliError (exit 2) naming
// the path, found by stat() before anything is opened, so a FIFO is never opened (opening one
// blocks until a writer appears) and a device is never read (/dev/zero never ends). The size is
// known up front, so callers check it against what a header promises before reading a payload.
// Checked by tests/cli/test_cli_inputs.py (directory, /dev/zero, FIFO, sparse 64 GiB file).
#ifndef DILATTN_TOOLS_REGULAR_FILE_H
#define DILATTN_TOOLS_REGULAR_FILE_H

#include <cstdint>
#include <string>
#include <vector>

namespace dilattn_cli {

class RegularFile {
 public:
  explicit RegularFile(const std::string& path);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;

  uint64_t size() const { return size_; }
  // Bytes [offset, offset + count) of the file; the range must lie within size().
  std::vector<unsigned char> read(uint64_t offset, uint64_t count) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// The whole of a regular file.
std::vector<unsigned char> read_regular_file(const std::string& path);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_REGULAR_FILE_H
