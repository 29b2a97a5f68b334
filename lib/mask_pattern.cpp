// mask_pattern.cpp - the block-sparse pattern grammar (SPEC 4): a string such as
// "local:2+sink:1+strided:4+random:0.05:seed=7" to the union of the masks its terms build.
//
// Grammar (SPEC 4.4; docs/cli.md, "Block-sparse patterns"):
//   pattern := term ('+' term)*
//   term    := name (':' field)*       fields are positional values, then options
//   local:W  causal_local:W  sink:G  strided:S  random:P[:seed=N]  dense
//   hier:PRESET | hier:S/W/C[,S/W/C...]  (PRESET: standard, fine_grained, long_range, ultra_sparse)
//   option 'causal' on any term keeps only causally allowed block pairs (dilattn_mask.h).
// Each term calls its builder (mask_builders.cpp); the results are joined by dilattn_mask_union.
// A bad term returns DILATTN_ERROR_INVALID_VALUE naming the term and what is wrong with it.
//
// Checked by tests/sparse/test_sparse_masks.cpp and tests/sparse/test_sparse_masks.py.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "errors.h"
#include "handles.h"

using dilattn::set_error;

namespace {

struct Shape {
  int64_t Nq, Nk, bq, bk;
};

// Owns the masks built so far, so every return path frees them.
struct MaskList {
  std::vector<dilattn_mask> masks;
  // Not dilattn_mask_destroy: that would clear the error being returned. Deleting a mask
  // unregisters it (handles.h).
  ~MaskList() {
    for (dilattn_mask m : masks) delete m;
  }
};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t at = s.find(sep, start);
    parts.push_back(s.substr(start, at == std::string::npos ? std::string::npos : at - start));
    if (at == std::string::npos) return parts;
    start = at + 1;
  }
}

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// Whole-string integer / real parsing: "4x" or "" is an error, not 4 or 0.
bool parse_int(const std::string& s, int64_t* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}
bool parse_uint(const std::string& s, uint64_t* out) {
  if (s.empty() || s[0] == '-') return false;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return false;
  *out = v;
  return true;
}
bool parse_real(const std::string& s, double* out) {
  if (s.empty()) return false;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size() || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

// DarcStar dilated-attention-pytorch's BlockSparseHierarchical presets, as (stride, window,
// block size) in tokens; window -1 is global. Our level semantics are in dilattn_mask.h.
struct Level {
  int64_t stride, window, block;
};
bool hier_preset(const std::string& name, std::vector<Level>* levels) {
  if (name == "standard")
    *levels = {{64, 256, 64}, {256, 1024, 128}, {1024, -1, 256}};
  else if (name == "fine_grained")
    *levels = {{1, 128, 32}, {2, 512, 64}, {8, 2048, 128}, {32, -1, 256}};
  else if (name == "long_range")
    *levels = {{1, 512, 128}, {8, 4096, 256}, {64, -1, 512}};
  else if (name == "ultra_sparse")
    *levels = {{1, 64, 16}, {16, 1024, 128}, {256, -1, 512}};
  else
    return false;
  return true;
}

#define BAD_TERM(...) set_error(DILATTN_ERROR_INVALID_VALUE, __VA_ARGS__)

// Builds one term into *out. `term` is the whole term (for messages), `index` its position.
dilattn_status build_term(const std::string& term, int index, const Shape& sh, dilattn_mask* out) {
  std::vector<std::string> f = split(term, ':');
  for (auto& x : f) x = trim(x);
  const std::string name = f[0];
  // Options (causal, seed=N) may follow the positional values.
  int32_t causal = name == "causal_local" ? 1 : 0;
  bool has_seed = false;
  uint64_t seed = 0;
  std::vector<std::string> values;
  for (size_t t = 1; t < f.size(); ++t) {
    if (f[t] == "causal") {
      causal = 1;
    } else if (f[t].compare(0, 5, "seed=") == 0) {
      if (!parse_uint(f[t].substr(5), &seed))
        return BAD_TERM("pattern term %d '%s': seed '%s' is not an unsigned integer", index,
                        term.c_str(), f[t].substr(5).c_str());
      has_seed = true;
    } else {
      values.push_back(f[t]);
    }
  }
  if (has_seed && name != "random")
    return BAD_TERM("pattern term %d '%s': only 'random' takes seed=", index, term.c_str());
  auto want = [&](size_t n, const char* usage) -> dilattn_status {
    if (values.size() != n)
      return BAD_TERM("pattern term %d '%s': expected %s", index, term.c_str(), usage);
    return DILATTN_SUCCESS;
  };
  int64_t n = 0;
  dilattn_status s = DILATTN_SUCCESS;
  if (name == "local" || name == "causal_local") {
    if ((s = want(1, "local:W (W >= 0 key blocks each side)")) != DILATTN_SUCCESS) return s;
    if (!parse_int(values[0], &n) || n < 0)
      return BAD_TERM("pattern term %d '%s': window '%s' is not an integer >= 0", index,
                      term.c_str(), values[0].c_str());
    s = dilattn_mask_local(out, sh.Nq, sh.Nk, sh.bq, sh.bk, n, causal);
  } else if (name == "sink") {
    if ((s = want(1, "sink:G (G >= 0 global blocks)")) != DILATTN_SUCCESS) return s;
    if (!parse_int(values[0], &n) || n < 0)
      return BAD_TERM("pattern term %d '%s': block count '%s' is not an integer >= 0", index,
                      term.c_str(), values[0].c_str());
    s = dilattn_mask_sink(out, sh.Nq, sh.Nk, sh.bq, sh.bk, n, causal);
  } else if (name == "strided") {
    if ((s = want(1, "strided:S (S >= 1)")) != DILATTN_SUCCESS) return s;
    if (!parse_int(values[0], &n) || n < 1)
      return BAD_TERM("pattern term %d '%s': stride '%s' is not an integer >= 1", index,
                      term.c_str(), values[0].c_str());
    s = dilattn_mask_strided(out, sh.Nq, sh.Nk, sh.bq, sh.bk, n, causal);
  } else if (name == "random") {
    if ((s = want(1, "random:P[:seed=N] (0 <= P <= 1)")) != DILATTN_SUCCESS) return s;
    double density = 0;
    if (!parse_real(values[0], &density) || density < 0 || density > 1)
      return BAD_TERM("pattern term %d '%s': density '%s' is not a number in [0, 1]", index,
                      term.c_str(), values[0].c_str());
    s = dilattn_mask_random(out, sh.Nq, sh.Nk, sh.bq, sh.bk, 1, density, seed, causal);
  } else if (name == "dense") {
    if ((s = want(0, "dense (no values)")) != DILATTN_SUCCESS) return s;
    // Every query block is global: G = INT64_MAX >= I for any shape, with no division by a
    // block size the builder has not checked yet.
    s = dilattn_mask_sink(out, sh.Nq, sh.Nk, sh.bq, sh.bk, std::numeric_limits<int64_t>::max(),
                          causal);
  } else if (name == "hier") {
    if ((s = want(1, "hier:PRESET or hier:S/W/C[,S/W/C...]")) != DILATTN_SUCCESS) return s;
    std::vector<Level> levels;
    if (!hier_preset(values[0], &levels)) {
      for (const std::string& lv : split(values[0], ',')) {
        const std::vector<std::string> sw = split(lv, '/');
        Level L{};
        if (sw.size() != 3 || !parse_int(sw[0], &L.stride) || !parse_int(sw[1], &L.window) ||
            !parse_int(sw[2], &L.block) || L.stride < 1 || L.window < -1 || L.block < 1)
          return BAD_TERM("pattern term %d '%s': level '%s' is not stride/window/block "
                          "(stride >= 1, window >= 0 or -1, block >= 1) nor a preset "
                          "(standard, fine_grained, long_range, ultra_sparse)",
                          index, term.c_str(), lv.c_str());
        levels.push_back(L);
      }
    }
    std::vector<int64_t> st, wi, bl;
    for (const Level& L : levels) {
      st.push_back(L.stride); wi.push_back(L.window); bl.push_back(L.block);
    }
    s = dilattn_mask_hierarchical(out, sh.Nq, sh.Nk, sh.bq, sh.bk,
                                  static_cast<int32_t>(levels.size()), st.data(), wi.data(),
                                  bl.data(), causal);
  } else {
    return BAD_TERM("pattern term %d '%s': unknown name '%s' (local, causal_local, sink, strided, "
                    "random, hier, dense)", index, term.c_str(), name.c_str());
  }
  if (s != DILATTN_SUCCESS) {  // a builder's own error (a shape, a size): say which term
    const std::string detail = dilattn_last_error();
    return set_error(s, "pattern term %d '%s': %s", index, term.c_str(), detail.c_str());
  }
  return DILATTN_SUCCESS;
}

}  // namespace

extern "C" dilattn_status dilattn_mask_from_pattern(dilattn_mask* mask, const char* pattern,
                                                    int64_t seqlen_q, int64_t seqlen_k,
                                                    int64_t block_q, int64_t block_k) {
  DILATTN_ABI_BEGIN
  if (mask == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'mask' is NULL");
  if (pattern == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'pattern' is NULL");
  const Shape sh{seqlen_q, seqlen_k, block_q, block_k};
  MaskList built;
  int index = 0;
  for (const std::string& raw : split(pattern, '+')) {
    const std::string term = trim(raw);
    if (term.empty())
      return set_error(DILATTN_ERROR_INVALID_VALUE, "pattern '%s': term %d is empty", pattern, index);
    dilattn_mask m = nullptr;
    if (dilattn_status s = build_term(term, index, sh, &m)) return s;
    built.masks.push_back(m);
    ++index;
  }
  if (built.masks.size() == 1) {  // hand the one mask over instead of copying it
    *mask = built.masks[0];
    built.masks.clear();
    return DILATTN_SUCCESS;
  }
  const std::string keep = pattern;  // dilattn_mask_union clears the last error on success
  dilattn_status s = dilattn_mask_union(mask, built.masks.data(),
                                        static_cast<int32_t>(built.masks.size()));
  if (s != DILATTN_SUCCESS) {
    const std::string detail = dilattn_last_error();
    return set_error(s, "pattern '%s': %s", keep.c_str(), detail.c_str());
  }
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
