// npy_header.cpp - a recursive-descent reader of the header dict (see npy_header.h):
//   dict  := '{' [entry (',' entry)* [',']] '}'        entry := string ':' value
//   value := string | 'True' | 'False' | tuple
//   tuple := '(' ')' | '(' int ',' [int (',' int)* [',']] ')'
// with Python's whitespace between tokens; '(4)' is the int 4 in Python, not a tuple, so it is
// refused like numpy refuses it ("shape is not valid").
#include "npy_header.h"

#include "cli_error.h"

namespace dilattn_cli {

namespace {

class DictReader {
 public:
  DictReader(const std::string& text, const std::string& name, bool python2_longs)
      : s_(text), name_(name), longs_(python2_longs) {}

  NpyHeaderDict read() {
    NpyHeaderDict d;
    bool seen_descr = false, seen_order = false, seen_shape = false;
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t')) ++p_;  // literal_eval strips these
    expect('{', "the header is not a dict literal");
    skip();
    while (peek() != '}') {
      const std::string key = string_literal("a key");
      skip();
      expect(':', "no ':' after key '" + key + "'");
      skip();
      bool* seen = key == "descr" ? &seen_descr : key == "fortran_order" ? &seen_order
                 : key == "shape" ? &seen_shape : nullptr;
      if (seen == nullptr)
        bad("unknown key '" + key + "' (a .npy header has exactly 'descr', 'fortran_order', 'shape')");
      if (*seen) bad("key '" + key + "' appears twice");
      *seen = true;
      if (key == "descr") d.descr = string_literal("'descr'");
      else if (key == "fortran_order") d.fortran_order = boolean("'fortran_order'");
      else d.shape = int_tuple("'shape'");
      skip();
      if (peek() == ',') {
        ++p_;
        skip();
      } else if (peek() != '}') {
        bad("expected ',' or '}' after the value of '" + key + "'");
      }
    }
    ++p_;
    skip();
    if (p_ != s_.size()) bad("text after the dict");
    for (const auto& [seen, key] : {std::pair<bool, const char*>{seen_descr, "descr"},
                                    {seen_order, "fortran_order"}, {seen_shape, "shape"}})
      if (!seen) bad(std::string("header has no '") + key + "' key");
    return d;
  }

 private:
  [[noreturn]] void bad(const std::string& what) const {
    fail_input(name_ + ": bad .npy header: " + what);
  }
  char peek() const {
    if (p_ >= s_.size()) bad("the header ends inside the dict");
    return s_[p_];
  }
  void expect(char c, const std::string& otherwise) {
    if (p_ >= s_.size() || s_[p_] != c) bad(otherwise);
    ++p_;
  }
  // Python's whitespace inside brackets (newlines included: implicit line joining).
  void skip() {
    while (p_ < s_.size() && (s_[p_] == ' ' || s_[p_] == '\t' || s_[p_] == '\n' ||
                              s_[p_] == '\r' || s_[p_] == '\f'))
      ++p_;
  }
  static bool identifier_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
  }

  std::string string_literal(const std::string& what) {
    const char q = peek();
    if (q != '\'' && q != '"') bad(what + " is not a string");
    std::string out;
    for (++p_;; ++p_) {
      if (p_ >= s_.size() || s_[p_] == '\n') bad(what + ": string is not closed");
      if (s_[p_] == '\\') bad(what + ": escape sequences in strings are not read");
      if (s_[p_] == q) break;
      out += s_[p_];
    }
    ++p_;
    skip();
    // Python joins adjacent literals ('<' 'f4'); numpy never writes that, so it is refused.
    if (p_ < s_.size() && (s_[p_] == '\'' || s_[p_] == '"'))
      bad(what + ": adjacent string literals are not read");
    return out;
  }

  bool boolean(const std::string& what) {
    for (const auto& [word, value] : {std::pair<const char*, bool>{"True", true}, {"False", false}}) {
      const size_t n = std::char_traits<char>::length(word);
      if (s_.compare(p_, n, word) == 0 && (p_ + n == s_.size() || !identifier_char(s_[p_ + n]))) {
        p_ += n;
        return value;
      }
    }
    bad(what + " is not True or False");
  }

  int64_t integer(const std::string& what) {
    const size_t start = p_;
    int64_t v = 0;
    while (p_ < s_.size() && s_[p_] >= '0' && s_[p_] <= '9') {
      if (__builtin_mul_overflow(v, int64_t{10}, &v) ||
          __builtin_add_overflow(v, int64_t{s_[p_] - '0'}, &v))
        bad(what + " holds a dimension that overflows int64");
      ++p_;
    }
    if (p_ == start) bad(what + " holds something other than a non-negative integer");
    // Python 3 refuses leading zeros ("04") except in zero itself ("00").
    if (s_[start] == '0' && v != 0) bad(what + " holds an integer with a leading zero");
    if (longs_ && p_ < s_.size() && s_[p_] == 'L') ++p_;
    if (p_ < s_.size() && (identifier_char(s_[p_]) || s_[p_] == '.'))
      bad(what + " holds something other than a non-negative integer");
    return v;
  }

  std::vector<int64_t> int_tuple(const std::string& what) {
    if (peek() != '(') bad(what + " is not a tuple");
    ++p_;
    skip();
    std::vector<int64_t> dims;
    bool comma = false;  // a one-element tuple needs its comma: (4) is the int 4
    while (peek() != ')') {
      dims.push_back(integer(what));
      skip();
      if (peek() == ',') {
        ++p_;
        comma = true;
        skip();
      } else if (peek() != ')') {
        bad(what + ": expected ',' or ')' in the tuple");
      }
    }
    ++p_;
    if (dims.size() == 1 && !comma) bad(what + " is a parenthesised integer, not a tuple");
    return dims;
  }

  const std::string& s_;
  const std::string& name_;
  bool longs_;
  size_t p_ = 0;
};

}  // namespace

NpyHeaderDict parse_npy_header_dict(const std::string& text, const std::string& name,
                                    bool python2_longs) {
  return DictReader(text, name, python2_longs).read();
}

}  // namespace dilattn_cli
