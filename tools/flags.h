// flags.h - command-line flag parsing for the dilattn tool.
//
// Each subcommand lists the flags it accepts (valued or boolean). Parsing takes "--name value"
// and "--name=value"; an unknown flag, a valued flag without a value, a repeated flag or a stray
// positional argument is a CliError (exit 2) naming it; "--help" or "-h" in place of a flag is
// HelpRequested. Typed getters validate every value
// (integers, positive integers, finite doubles, comma lists) and name the flag in their error.
// Checked by tests/cli/test_cli_flags.py (unknown flag, missing flag, missing value, bad number,
// "-h" as a value).
#ifndef DILATTN_TOOLS_FLAGS_H
#define DILATTN_TOOLS_FLAGS_H

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dilattn_cli {

// Thrown by Flags for "--help" or "-h" where a flag or argument goes (never for a flag's value,
// so "--out -h" writes a file named -h); main() prints the usage text and exits 0.
struct HelpRequested {};

struct FlagSpec {
  const char* name;  // without the leading "--"
  bool takes_value;
};

class Flags {
 public:
  // Parses argv[first..argc); at most `max_positional` arguments that are not flags.
  Flags(int argc, char** argv, int first, const std::vector<FlagSpec>& allowed,
        size_t max_positional);

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // The value of a required flag ("missing required flag --name" otherwise).
  const std::string& required(const std::string& name) const;
  std::string get(const std::string& name, const std::string& fallback) const;
  // An integer >= min_value.
  int64_t get_int(const std::string& name, int64_t fallback, int64_t min_value) const;
  // A decimal integer in [0, 2^64) (a seed).
  uint64_t get_uint64(const std::string& name, uint64_t fallback) const;
  // A finite double (>= 0 when non_negative).
  double get_double(const std::string& name, double fallback, bool non_negative) const;
  // "2048,4096": integers >= 1, at least one.
  std::vector<int64_t> get_int_list(const std::string& name) const;

  const std::vector<std::string>& positional() const { return positional_; }
  // Every flag given, by name, with its value as written ("" for a boolean flag).
  const std::map<std::string, std::string>& values() const { return values_; }

 private:
  std::map<std::string, std::string> values_;  // boolean flags map to ""
  std::vector<std::string> positional_;
};

// Parses a whole decimal integer ("12", "-3"); false on anything else or overflow.
bool parse_int(const std::string& text, int64_t* out);

}  // namespace dilattn_cli

#endif  // DILATTN_TOOLS_FLAGS_H
