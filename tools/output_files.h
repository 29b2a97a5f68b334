// output_files.h - all-or-nothing output files for the dilattn tool.
//
// Each output is reserved up front as a temporary file next to its target (so a bad output
// directory fails before any computation), filled once the results exist, and renamed onto the
// target only in commit(), after every output is written. Any error before commit() removes the
// temporaries: an error never leaves a partial file and never touches an existing target.
// Checked by tests/cli/test_cli.py (no output after each malformed-input case; an existing
// output file left byte-identical after a failure).
#ifndef DILATTN_TOOLS_OUTPUT_FILES_H
#define DILATTN_TOOLS_OUTPUT_FILES_H

#include <string>
#include <vector>

namespace dilattn_cli {

class OutputFiles {
 public:
  OutputFiles() = default;
  OutputFiles(const OutputFiles&) = delete;
  OutputFiles& operator=(const OutputFiles&) = delete;
  ~OutputFiles();  // removes every temporary not yet renamed

  // Reserves a temporary for `path` (given by flag `flag`, for messages); returns its index.
  size_t reserve(const std::string& flag, const std::string& path);
  // Writes the contents of output `index` into its temporary.
  void write(size_t index, const std::vector<unsigned char>& bytes);
  // Renames every temporary onto its target.
  void commit();

 private:
  struct Entry {
    std::string flag, path, temp;
    bool written = false;
  };
  std::vector<Entry> entries_;
};

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_OUTPUT_FILES_H
