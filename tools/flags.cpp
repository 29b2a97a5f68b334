// flags.cpp - parsing and validating the dilattn tool's flags (see flags.h).
//
// One pass over argv: a word starting with "--" must be an allowed flag; a valued flag takes the
// text after '=' or the next word (which must not itself be a flag); everything else is
// positional. Numbers go through strtoll/strtod with the whole text consumed, so "12x", "" and
// "1e999" are rejected with the flag's name (a subnormal such as "1e-310" is accepted).
// Checked by tests/cli/test_cli_flags.py.
#include "flags.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "cli_error.h"

namespace dilattn_cli {

bool parse_int(const std::string& text, int64_t* out) {
  if (text.empty() || text.find_first_of(" \t\n") != std::string::npos) return false;
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  *out = static_cast<int64_t>(v);
  return true;
}

Flags::Flags(int argc, char** argv, int first, const std::vector<FlagSpec>& allowed,
             size_t max_positional) {
  for (int i = first; i < argc; ++i) {
    const std::string word = argv[i];
    if (word == "--help" || word == "-h") throw HelpRequested{};
    if (word.size() < 2 || word.compare(0, 2, "--") != 0) {
      if (positional_.size() >= max_positional)
        fail_input("unexpected argument '" + word + "'");
      positional_.push_back(word);
      continue;
    }
    const size_t eq = word.find('=');
    const std::string name = word.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : allowed)
      if (name == f.name) spec = &f;
    if (spec == nullptr) fail_input("unknown flag --" + name);
    if (values_.count(name)) fail_input("flag --" + name + " given twice");
    std::string value;
    if (spec->takes_value) {
      if (eq != std::string::npos) {
        value = word.substr(eq + 1);
      } else {
        if (i + 1 >= argc || std::string(argv[i + 1]).compare(0, 2, "--") == 0)
          fail_input("flag --" + name + " needs a value");
        value = argv[++i];
      }
      if (value.empty()) fail_input("flag --" + name + " has an empty value");
    } else if (eq != std::string::npos) {
      fail_input("flag --" + name + " takes no value");
    }
    values_[name] = value;
  }
}

const std::string& Flags::required(const std::string& name) const {
  const auto it = values_.find(name);
  if (it == values_.end()) fail_input("missing required flag --" + name);
  return it->second;
}

std::string Flags::get(const std::string& name, const std::string& fallback) const {
  const auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

int64_t Flags::get_int(const std::string& name, int64_t fallback, int64_t min_value) const {
  if (!has(name)) return fallback;
  const std::string& text = values_.at(name);
  int64_t v = 0;
  if (!parse_int(text, &v)) fail_input("flag --" + name + ": '" + text + "' is not an integer");
  if (v < min_value)
    fail_input("flag --" + name + ": " + text + " must be >= " + std::to_string(min_value));
  return v;
}

uint64_t Flags::get_uint64(const std::string& name, uint64_t fallback) const {
  if (!has(name)) return fallback;
  const std::string& text = values_.at(name);
  // Digits only: strtoull would take "-1" as 2^64 - 1.
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    fail_input("flag --" + name + ": '" + text + "' is not an integer >= 0");
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(text.c_str(), &end, 10);
  if (errno != 0 || end != text.c_str() + text.size())
    fail_input("flag --" + name + ": " + text + " is above 2^64 - 1");
  return static_cast<uint64_t>(v);
}

double Flags::get_double(const std::string& name, double fallback, bool non_negative) const {
  if (!has(name)) return fallback;
  const std::string& text = values_.at(name);
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  // ERANGE with a finite result is an underflow: a subnormal (or zero) is a finite number
  // like any other; an overflow comes back infinite and is refused with NaN and infinities.
  const bool range_ok = errno == 0 || (errno == ERANGE && std::isfinite(v));
  if (!range_ok || end != text.c_str() + text.size() || !std::isfinite(v))
    fail_input("flag --" + name + ": '" + text + "' is not a finite number");
  if (non_negative && v < 0) fail_input("flag --" + name + ": " + text + " must be >= 0");
  return v;
}

std::vector<int64_t> Flags::get_int_list(const std::string& name) const {
  const std::string& text = required(name);
  std::vector<int64_t> out;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    const std::string item = text.substr(start, comma == std::string::npos ? std::string::npos
                                                                             : comma - start);
    int64_t v = 0;
    if (!parse_int(item, &v) || v < 1)
      fail_input("flag --" + name + ": '" + item + "' in '" + text + "' is not an integer >= 1");
    out.push_back(v);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

}  // namespace dilattn_cli
