// output_files.h - all-or-nothing output files for the dilattn tool.
//
// Rules (each a CliError, exit 2, naming the flag, before any computation):
//   * an output that is the same file as another output or as an input is refused: paths are
//     compared as files (same device and inode when the file exists; same resolved directory and
//     name when it does not), not as strings, so "o.npy", "./o.npy", "sub/../o.npy", a symlink
//     or a hard link to it all clash;
//   * an existing output must be a regular file (a directory, FIFO or device is refused) and
//     writable: a read-only output (no write bit, or no write access) is refused and kept as it
//     is; a writable one is replaced by a file with the same permission bits;
//   * each output gets its temporary in its own directory when reserved (so an unwritable
//     directory fails before the work); the temporary's name is short and fixed-length, so an
//     output name up to NAME_MAX works.
// Temporaries are filled once the results exist and renamed onto their targets only in commit(),
// after every one of them is written and every target re-checked. Any error before commit(), and
// SIGINT, SIGTERM or SIGHUP at any time, removes every temporary: an error never leaves a partial
// file and never touches an existing target.
// Checked by tests/cli/test_cli_outputs.py.
#ifndef DILATTN_TOOLS_OUTPUT_FILES_H
#define DILATTN_TOOLS_OUTPUT_FILES_H

#include <sys/types.h>

#include <string>
#include <vector>

namespace dilattn_cli {

class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();  // removes every temporary not yet renamed

  // An input file given by flag `flag` (no output may be it); call before reserving outputs.
  void note_input(const std::string& flag, const std::string& path);
  // Checks `path` (given by flag `flag`) and creates its temporary; returns its index.
  size_t reserve(const std::string& flag, const std::string& path);
  // Writes the contents of output `index` into its temporary.
  void write(size_t index, const std::vector<unsigned char>& bytes);
  // Renames every temporary onto its target.
  void commit();

  // Which file a path names: its resolved directory entry, and its inode when it exists.
  struct Identity {
    std::string entry;  // realpath(directory) + "/" + name, or the path as given if unresolved
    bool exists = false;
    dev_t dev = 0;
    ino_t ino = 0;
  };

 private:
  struct Named {
    std::string flag, path;
    Identity id;
  };
  struct Entry {
    Named target;
    std::string temp;
    int fd = -1;
    int slot = -1;  // in the signal handler's table
    bool written = false;
  };
  // A CliError when `id` is a reserved output's file, or (with_inputs) an input's.
  void refuse_alias(const std::string& flag, const std::string& path, const Identity& id,
                    bool with_inputs) const;
  std::vector<Named> inputs_;
  std::vector<Entry> entries_;
};

// Removes every temporary of every OutputFiles now, for a process that must end at once without
// unwinding (ring_mpi.cpp, a rank past its timeout); uses only unlink(), as the signal handler.
void remove_temporaries_now();

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_OUTPUT_FILES_H
