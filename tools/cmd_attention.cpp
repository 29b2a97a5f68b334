// cmd_attention.cpp - `dilattn forward` and `dilattn backward`: attention on .npy files through
// the public C ABI (SPEC 2-4 forward, SPEC 6 backward).
//
//   1. parse and check every flag (names, numbers, which flags go together);
//   2. reserve the output files (a bad output path, or one that is another output or an input,
//      fails before any work);
//   3. read Q, K, V (and dO, O, LSE) and check dtypes and shapes against each other, naming the file;
//   4. describe the attention (dense, dilated, block-sparse from --mask or --pattern; the SPEC
//      10.1 window, softcap and ALiBi slopes; the SPEC 10.2 packed batch's offsets; SPEC 10.3
//      sinks), make a plan;
//   5. run forward (backward: the given O and LSE, or a forward run first when they are absent);
//   6. write every output, then rename them all into place.
// LSE is written <f8 when the plan runs on ref or has f64 inputs (the cpu backend computes them
// in f64, SPEC 12), else <f4 (SPEC 1).
// Checked by tests/cli/test_cli_forward_backward.py against a numpy implementation of SPEC 2-4
// and 6, and by test_cli_outputs.py (output rules).
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "cli_error.h"
#include "commands.h"
#include "device_memory.h"
#include "dilattn.h"
#include "flags.h"
#include "library_status.h"
#include "mask_input.h"
#include "npy.h"
#include "output_files.h"
#include "progress_line.h"
#include "ring_mpi.h"
#include "ring_run.h"

namespace dilattn_cli {

namespace {

// ---------------------------------------------------------------- flags

const FlagSpec kCommonFlags[] = {
    {"q", true}, {"k", true}, {"v", true}, {"segments", true}, {"dilations", true},
    {"heads-mode", true}, {"causal", false}, {"scale", true}, {"backend", true},
    {"threads", true}, {"block-size", true}, {"block-size-k", true}, {"mask", true},
    {"pattern", true}, {"ring-threads", true}, {"ring", true}, {"ring-split", true},
    {"ring-timeout", true}, {"dropout", true}, {"seed", true}, {"offset", true},
    {"window", true}, {"softcap", true}, {"alibi-slopes", true}, {"cu-seqlens-q", true},
    {"cu-seqlens-k", true}, {"sinks", true}, {"no-progress", false},
    {"progress-after", true}};

std::vector<FlagSpec> with_common(std::vector<FlagSpec> own) {
  own.insert(own.end(), std::begin(kCommonFlags), std::end(kCommonFlags));
  return own;
}

dilattn_backend parse_backend(const std::string& name) {
  static const struct { const char* name; dilattn_backend b; } known[] = {
      {"auto", DILATTN_BACKEND_AUTO}, {"ref", DILATTN_BACKEND_REF}, {"cpu", DILATTN_BACKEND_CPU},
      {"cuda", DILATTN_BACKEND_CUDA}, {"emu", DILATTN_BACKEND_EMU}};
  for (const auto& k : known)
    if (name == k.name) return k.b;
  fail_input("flag --backend: '" + name + "' is not one of ref, cpu, cuda, emu, auto");
}

dilattn_head_mode parse_head_mode(const std::string& name) {
  if (name == "mod") return DILATTN_HEADS_MOD;
  if (name == "block") return DILATTN_HEADS_BLOCK;
  if (name == "groups") return DILATTN_HEADS_GROUPS;
  fail_input("flag --heads-mode: '" + name + "' is not one of mod, block, groups");
}

// The attention settings every subcommand shares, checked before any file is read.
struct Settings {
  std::string q_path, k_path, v_path;
  dilattn_backend backend = DILATTN_BACKEND_AUTO;
  bool causal = false;
  bool has_scale = false;
  double scale = 0.0;
  int64_t threads = 0;
  std::vector<int64_t> segments, dilations;
  dilattn_head_mode head_mode = DILATTN_HEADS_MOD;
  std::string mask_path, pattern;
  int64_t block_q = 64, block_k = 64;
  RingOptions ring;  // --ring-threads P | --ring mpi [--ring-split contiguous|zigzag]: SPEC 5
  // --dropout P --seed S [--offset O]: SPEC 11; the calls then carry the seed and offset.
  bool dropout = false;
  double dropout_p = 0.0;
  dilattn_call_options call_options = dilattn_call_options_make();

  // --sinks: SPEC 10.3, H logits that every call carries (call_options.sinks points here).
  std::vector<double> sinks;

  // The options of dilattn_forward_ex / dilattn_backward_ex, or null without --dropout and
  // --sinks. The sink pointer is set here, from this object's own vector.
  dilattn_call_options call() const {
    dilattn_call_options c = call_options;
    c.sinks = sinks.empty() ? nullptr : sinks.data();
    return c;
  }
  bool needs_options() const { return dropout || !sinks.empty(); }
  // A progress line on stderr for the single-device calls (progress_line.h); --no-progress: none;
  // --progress-after S: drawn once a call has run S seconds (default 1).
  bool progress = true;
  double progress_after = 1.0;

  // SPEC 10.1 (ref and cpu; AUTO resolves to cpu): --window L,R, --softcap C, --alibi-slopes.
  bool has_window = false;
  int64_t window_left = -1, window_right = -1;
  double softcap = 0;
  std::vector<double> alibi_slopes;
  // SPEC 10.2 (ref and cpu): --cu-seqlens-q/-k, n + 1 offsets each, or both empty.
  std::vector<int64_t> cu_seqlens_q, cu_seqlens_k;
};

// A finite number of flag --name, the whole text consumed.
double parse_finite(const std::string& name, const std::string& item, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(item.c_str(), &end);
  const bool range_ok = errno == 0 || (errno == ERANGE && std::isfinite(v));
  if (item.empty() || !range_ok || end != item.c_str() + item.size() || !std::isfinite(v))
    fail_input("flag --" + name + ": '" + item + "' in '" + text + "' is not a finite number");
  return v;
}

// --window L,R: two integers, each >= 0 or -1 (unbounded).
void parse_window(const Flags& f, Settings* s) {
  const std::string text = f.get("window", "");
  const size_t comma = text.find(',');
  int64_t bounds[2] = {0, 0};
  const std::string items[2] = {text.substr(0, comma),
                                comma == std::string::npos ? "" : text.substr(comma + 1)};
  if (comma == std::string::npos || !parse_int(items[0], &bounds[0]) ||
      !parse_int(items[1], &bounds[1]))
    fail_input("flag --window: '" + text + "' is not LEFT,RIGHT (two integers, -1 unbounded)");
  for (int side = 0; side < 2; ++side)
    if (bounds[side] < -1)
      fail_input("flag --window: " + items[side] + " in '" + text + "' must be >= -1 (-1: unbounded)");
  s->has_window = true;
  s->window_left = bounds[0];
  s->window_right = bounds[1];
}

// A flag's value that names a .npy file (anything longer than ".npy" ending in it), not a list.
bool names_npy_file(const std::string& text) {
  const std::string suffix = ".npy";
  return text.size() > suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The items of a comma list, empty ones kept (the caller's parse refuses them by name).
std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> items;
  size_t start = 0;
  while (true) {
    const size_t comma = text.find(',', start);
    items.push_back(text.substr(start, comma == std::string::npos ? std::string::npos
                                                                  : comma - start));
    if (comma == std::string::npos) return items;
    start = comma + 1;
  }
}

// --alibi-slopes: a .npy file of H or B * H floats ([H] or [B, H]), or a comma list. The file
// is read here, with the flags, so a bad one exits 2 before Q, K and V are read.
void parse_alibi_slopes(const Flags& f, Settings* s) {
  const std::string text = f.get("alibi-slopes", "");
  if (names_npy_file(text)) {
    const NpyArray a = read_npy_file(text);
    if (a.type != NpyType::f2 && a.type != NpyType::f4 && a.type != NpyType::f8)
      fail_input(text + ": dtype " + std::string(npy_descr(a.type)) +
                 ", ALiBi slopes must be <f2, <f4 or <f8");
    if (a.shape.size() != 1 && a.shape.size() != 2)
      fail_input(text + ": shape " + shape_string(a.shape) + ", ALiBi slopes are [H] or [B, H]");
    for (int64_t e = 0; e < a.numel(); ++e) {
      const double v = a.get(e);
      if (!std::isfinite(v)) fail_input(text + ": slope " + std::to_string(e) + " is not finite");
      s->alibi_slopes.push_back(v);
    }
  } else {
    for (const std::string& item : comma_items(text))
      s->alibi_slopes.push_back(parse_finite("alibi-slopes", item, text));
  }
  if (s->alibi_slopes.empty()) fail_input("flag --alibi-slopes: " + text + " holds no slope");
}

// --cu-seqlens-q/-k: a 1-D .npy of <i4 or <i8 offsets, or a comma list of integers. Their
// order and ends are the library's to check (SPEC 10.2), which names the index.
std::vector<int64_t> parse_offsets(const Flags& f, const std::string& name) {
  const std::string text = f.get(name, "");
  std::vector<int64_t> out;
  if (names_npy_file(text)) {
    const NpyArray a = read_npy_file(text);
    if (a.shape.size() != 1)
      fail_input(text + ": shape " + shape_string(a.shape) + ", --" + name +
                 " needs a 1-D array of offsets");
    for (int64_t e = 0; e < a.numel(); ++e) out.push_back(a.get_index(e, text));
  } else {
    for (const std::string& item : comma_items(text)) {
      int64_t v = 0;
      if (!parse_int(item, &v))
        fail_input("flag --" + name + ": '" + item + "' in '" + text + "' is not an integer");
      out.push_back(v);
    }
  }
  if (out.size() < 2)
    fail_input("flag --" + name + ": " + std::to_string(out.size()) +
               " offsets, a packed batch of n sequences needs n + 1 >= 2");
  return out;
}

// --sinks: H logits (SPEC 10.3), a comma list or a 1-D .npy of floats; each finite or -inf
// ("-inf" in a list). The count is checked against H once Q is read.
void parse_sinks(const Flags& f, Settings* s) {
  const std::string text = f.get("sinks", "");
  if (names_npy_file(text)) {
    const NpyArray a = read_npy_file(text);
    if (a.type != NpyType::f2 && a.type != NpyType::f4 && a.type != NpyType::f8)
      fail_input(text + ": dtype " + std::string(npy_descr(a.type)) +
                 ", sinks must be <f2, <f4 or <f8");
    if (a.shape.size() != 1)
      fail_input(text + ": shape " + shape_string(a.shape) + ", sinks are [H]");
    for (int64_t e = 0; e < a.numel(); ++e) s->sinks.push_back(a.get(e));
  } else {
    for (const std::string& item : comma_items(text))
      s->sinks.push_back(item == "-inf" ? -std::numeric_limits<double>::infinity()
                                        : parse_finite("sinks", item, text));
  }
  for (size_t e = 0; e < s->sinks.size(); ++e)
    if (std::isnan(s->sinks[e]) || s->sinks[e] == std::numeric_limits<double>::infinity())
      fail_input("flag --sinks: value " + std::to_string(e) + " of " + text +
                 " is not finite or -inf");
  if (s->sinks.empty()) fail_input("flag --sinks: " + text + " holds no value");
}

void parse_packed(const Flags& f, Settings* s) {
  if (f.has("cu-seqlens-q") != f.has("cu-seqlens-k"))
    fail_input("flags --cu-seqlens-q and --cu-seqlens-k go together (a packed batch needs both)");
  if (!f.has("cu-seqlens-q")) return;
  s->cu_seqlens_q = parse_offsets(f, "cu-seqlens-q");
  s->cu_seqlens_k = parse_offsets(f, "cu-seqlens-k");
  if (s->cu_seqlens_q.size() != s->cu_seqlens_k.size())
    fail_input("flag --cu-seqlens-k: " + std::to_string(s->cu_seqlens_k.size()) +
               " offsets, --cu-seqlens-q has " + std::to_string(s->cu_seqlens_q.size()) +
               " (one more than the number of sequences, each)");
}

Settings parse_settings(const Flags& f) {
  Settings s;
  s.q_path = f.required("q");
  s.k_path = f.required("k");
  s.v_path = f.required("v");
  s.backend = parse_backend(f.get("backend", "auto"));
  s.causal = f.has("causal");
  s.progress = !f.has("no-progress");
  s.progress_after = f.get_double("progress-after", 1.0, true);
  s.has_scale = f.has("scale");
  s.scale = f.get_double("scale", 0.0, false);
  s.threads = f.get_int("threads", 0, 1);
  if (s.threads > 4096) fail_input("flag --threads: " + std::to_string(s.threads) + " is above 4096");
  if (f.has("segments")) {
    s.segments = f.get_int_list("segments");
    if (!f.has("dilations")) fail_input("flag --segments needs --dilations (one per segment)");
    s.dilations = f.get_int_list("dilations");
    if (s.dilations.size() != s.segments.size())
      fail_input("flag --dilations: " + std::to_string(s.dilations.size()) + " values, --segments has " +
                 std::to_string(s.segments.size()));
    s.head_mode = parse_head_mode(f.get("heads-mode", "mod"));
  } else {
    for (const char* only : {"dilations", "heads-mode"})
      if (f.has(only)) fail_input(std::string("flag --") + only + " needs --segments");
  }
  if (f.has("mask") && f.has("pattern")) fail_input("flags --mask and --pattern exclude each other");
  s.mask_path = f.get("mask", "");
  s.pattern = f.get("pattern", "");
  const bool sparse = f.has("mask") || f.has("pattern");
  if (sparse && f.has("segments")) fail_input("flag --segments excludes --mask and --pattern");
  if (!sparse)
    for (const char* only : {"block-size", "block-size-k"})
      if (f.has(only)) fail_input(std::string("flag --") + only + " needs --mask or --pattern");
  s.block_q = f.get_int("block-size", 64, 1);
  s.block_k = f.get_int("block-size-k", s.block_q, 1);
  const int64_t ranks = f.get_int("ring-threads", 0, 1);
  if (ranks > 4096) fail_input("flag --ring-threads: " + std::to_string(ranks) + " is above 4096");
  s.ring.ranks = static_cast<int32_t>(ranks);
  if (f.has("ring")) {
    const std::string transport = f.get("ring", "");
    if (transport != "mpi") fail_input("flag --ring: '" + transport + "' is not one of mpi");
    if (f.has("ring-threads")) fail_input("flags --ring and --ring-threads exclude each other");
    s.ring.mpi = true;
  }
  // The seed is required with --dropout, as the library requires it (SPEC 11.2): a default
  // would repeat one mask for every run.
  s.dropout = f.has("dropout");
  if (s.dropout && !f.has("seed")) fail_input("flag --dropout needs --seed");
  if (!s.dropout)
    for (const char* only : {"seed", "offset"})
      if (f.has(only)) fail_input(std::string("flag --") + only + " needs --dropout");
  s.dropout_p = f.get_double("dropout", 0.0, true);
  s.call_options.dropout_seed = f.get_uint64("seed", 0);
  s.call_options.dropout_offset = f.get_uint64("offset", 0);
  if (f.has("ring-timeout")) {
    if (!s.ring.any()) fail_input("flag --ring-timeout needs --ring-threads or --ring mpi");
    const int64_t seconds = f.get_int("ring-timeout", 0, 1);
    if (seconds > kMaxRingTimeoutSeconds)
      fail_input("flag --ring-timeout: " + std::to_string(seconds) + " is above " +
                 std::to_string(kMaxRingTimeoutSeconds) + " seconds");
    s.ring.timeout_ms = static_cast<int32_t>(seconds * 1000);
  }
  if (f.has("window")) parse_window(f, &s);
  s.softcap = f.get_double("softcap", 0.0, true);
  if (f.has("alibi-slopes")) parse_alibi_slopes(f, &s);
  parse_packed(f, &s);
  if (f.has("sinks")) parse_sinks(f, &s);
  if (f.has("ring-split")) {
    if (!s.ring.any()) fail_input("flag --ring-split needs --ring-threads or --ring mpi");
    const std::string split = f.get("ring-split", "");
    if (split == "zigzag") s.ring.split = DILATTN_RING_ZIGZAG;
    else if (split != "contiguous")
      fail_input("flag --ring-split: '" + split + "' is not one of contiguous, zigzag");
  }
  return s;
}

// A process that mpirun (Open MPI: OMPI_COMM_WORLD_SIZE; MPICH's hydra: PMI_SIZE) started as
// one of several, without --ring mpi, would run the whole command alone while the ranks that
// have the flag wait for it in MPI_Init, which has no timeout: refused, so that mpirun stops the
// job. (A launch where every rank has --ring mpi agrees on the rest in MpiWorld.)
void check_launch(const Settings& s) {
  if (s.ring.mpi) return;
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* size = std::getenv(var);
    int64_t n = 0;
    if (size != nullptr && parse_int(size, &n) && n > 1)
      fail_input("flag --ring mpi is missing, and this process is one of " + std::to_string(n) +
                 " that an MPI launcher started (" + var + "=" + size + "); every rank of "
                 "--ring mpi needs the same command and flags");
  }
}

// ---------------------------------------------------------------- inputs

// The inputs every subcommand shares, so that no output may be one of them (output_files.h).
void note_inputs(const Settings& s, OutputFiles* outputs) {
  outputs->note_input("q", s.q_path);
  outputs->note_input("k", s.k_path);
  outputs->note_input("v", s.v_path);
  if (!s.mask_path.empty()) outputs->note_input("mask", s.mask_path);
}

dilattn_dtype dtype_of(NpyType t, const std::string& path) {
  switch (t) {
    case NpyType::f4: return DILATTN_F32;
    case NpyType::f8: return DILATTN_F64;
    case NpyType::f2: return DILATTN_F16;
    default: break;
  }
  fail_input(path + ": dtype " + npy_descr(t) + ", expected <f4, <f8 or <f2");
}

// An attention operand: 4-D, a float dtype, the same dtype as Q.
NpyArray read_operand(const std::string& path, const char* flag, const NpyArray* q) {
  NpyArray a = read_npy_file(path);
  dtype_of(a.type, path);
  if (a.shape.size() != 4)
    fail_input(path + ": shape " + shape_string(a.shape) + " has " + std::to_string(a.shape.size()) +
               " dimensions, --" + flag + " needs 4 ([B, N, H, D])");
  if (q != nullptr && a.type != q->type)
    fail_input(path + ": dtype " + npy_descr(a.type) + " differs from --q's " + npy_descr(q->type));
  return a;
}

void require_shape(const NpyArray& a, const std::string& path, const std::vector<int64_t>& want,
                   const std::string& why) {
  if (a.shape != want)
    fail_input(path + ": shape " + shape_string(a.shape) + ", expected " + shape_string(want) + " (" +
               why + ")");
}

struct Operands {
  NpyArray q, k, v;
  dilattn_dtype dtype = DILATTN_F32;
  int64_t B = 0, Nq = 0, Nk = 0, H = 0, Hkv = 0, D = 0;
};

void set_dims(Operands* o) {
  o->dtype = o->q.type == NpyType::f8 ? DILATTN_F64 : o->q.type == NpyType::f2 ? DILATTN_F16 : DILATTN_F32;
  o->B = o->q.shape[0]; o->Nq = o->q.shape[1]; o->H = o->q.shape[2]; o->D = o->q.shape[3];
  o->Nk = o->k.shape[1]; o->Hkv = o->k.shape[2];
}

Operands read_operands(const Settings& s) {
  Operands o;
  o.q = read_operand(s.q_path, "q", nullptr);
  o.k = read_operand(s.k_path, "k", &o.q);
  o.v = read_operand(s.v_path, "v", &o.q);
  dtype_of(o.q.type, s.q_path);
  set_dims(&o);
  if (o.k.shape[0] != o.B || o.k.shape[3] != o.D)
    fail_input(s.k_path + ": shape " + shape_string(o.k.shape) + " does not match --q's " +
               shape_string(o.q.shape) + " (B and D must agree)");
  require_shape(o.v, s.v_path, o.k.shape, "V must have K's shape");
  for (int64_t d : o.q.shape)
    if (d < 1) fail_input(s.q_path + ": shape " + shape_string(o.q.shape) + " has an empty dimension");
  for (int64_t d : o.k.shape)
    if (d < 1) fail_input(s.k_path + ": shape " + shape_string(o.k.shape) + " has an empty dimension");
  if (o.H % o.Hkv != 0)
    fail_input(s.k_path + ": " + std::to_string(o.Hkv) + " kv heads do not divide --q's " +
               std::to_string(o.H) + " heads");
  return o;
}

// ---------------------------------------------------------------- the plan

class DescHandle {
 public:
  DescHandle() { check_status(dilattn_desc_create(&desc_), "desc"); }
  ~DescHandle() { dilattn_desc_destroy(desc_); }
  DescHandle(const DescHandle&) = delete;
  DescHandle& operator=(const DescHandle&) = delete;
  dilattn_desc get() const { return desc_; }

 private:
  dilattn_desc desc_ = nullptr;
};

class PlanHandle {
 public:
  PlanHandle() = default;
  ~PlanHandle() { dilattn_plan_destroy(plan_); }
  PlanHandle(const PlanHandle&) = delete;
  PlanHandle& operator=(const PlanHandle&) = delete;
  dilattn_plan* out() { return &plan_; }
  dilattn_plan get() const { return plan_; }

 private:
  dilattn_plan plan_ = nullptr;
};

// `file_mask`: the mask --mask named, already read (load_mask_file).
void make_plan(const Settings& s, const Operands& o, const MaskHandle& file_mask, PlanHandle* plan) {
  DescHandle desc;
  check_status(dilattn_desc_set_causal(desc.get(), s.causal ? 1 : 0), "--causal");
  if (s.has_scale) check_status(dilattn_desc_set_scale(desc.get(), s.scale), "--scale");
  if (s.dropout) check_status(dilattn_desc_set_dropout(desc.get(), s.dropout_p), "--dropout");
  check_status(dilattn_desc_set_num_threads(desc.get(), static_cast<int32_t>(s.threads)), "--threads");
  if (s.has_window)
    check_status(dilattn_desc_set_window(desc.get(), s.window_left, s.window_right), "--window");
  if (s.softcap != 0) check_status(dilattn_desc_set_softcap(desc.get(), s.softcap), "--softcap");
  if (!s.alibi_slopes.empty())
    check_status(dilattn_desc_set_alibi(desc.get(), s.alibi_slopes.data(),
                                        static_cast<int64_t>(s.alibi_slopes.size())),
                 "--alibi-slopes");
  if (!s.sinks.empty()) {
    if (static_cast<int64_t>(s.sinks.size()) != o.H)
      fail_input("flag --sinks: " + std::to_string(s.sinks.size()) + " values, need heads_q = " +
                 std::to_string(o.H) + " (one per query head)");
    check_status(dilattn_desc_set_sinks(desc.get(), 1), "--sinks");
  }
  if (!s.cu_seqlens_q.empty())
    check_status(dilattn_desc_set_varlen(desc.get(),
                                         static_cast<int64_t>(s.cu_seqlens_q.size()) - 1,
                                         s.cu_seqlens_q.data(), s.cu_seqlens_k.data()),
                 "--cu-seqlens-q/--cu-seqlens-k");
  if (!s.segments.empty()) {
    check_status(dilattn_desc_set_dilated(desc.get(), static_cast<int32_t>(s.segments.size()),
                                          s.segments.data(), s.dilations.data(), s.head_mode),
                 "--segments/--dilations");
  } else if (!s.mask_path.empty()) {
    check_status(dilattn_desc_set_block_sparse(desc.get(), file_mask.get()), "--mask " + s.mask_path);
  } else if (!s.pattern.empty()) {
    MaskHandle mask;
    build_mask_pattern(s.pattern, o.Nq, o.Nk, s.block_q, s.block_k, &mask);
    // The description keeps its own reference; our handle may go.
    check_status(dilattn_desc_set_block_sparse(desc.get(), mask.get()), "--pattern");
  }
  const dilattn_shape shape = dilattn_shape_make(o.B, o.Nq, o.Nk, o.H, o.Hkv, o.D);
  check_status(dilattn_plan_create(plan->out(), desc.get(), &shape, o.dtype, s.backend),
               "plan (--backend " + std::string(dilattn_backend_name(s.backend)) + ")");
}

dilattn_backend plan_backend(const PlanHandle& plan) {
  dilattn_backend b = DILATTN_BACKEND_REF;
  check_status(dilattn_plan_backend(plan.get(), &b), "plan");
  return b;
}

// --ring mpi moves host memory (the library's MPI transport), so its plan must run on the CPU;
// --ring-threads puts each rank's shards where the plan's backend reads them (shard_place).
void check_ring_backend(const Settings& s, const PlanHandle& plan) {
  if (s.ring.mpi && plan_backend(plan) == DILATTN_BACKEND_CUDA)
    throw CliError(kExitRuntime, "flag --ring mpi: ring attention over MPI runs on CPU backends "
                                 "(ref, cpu, emu); the plan runs on cuda");
}

ShardPlace shard_place(const PlanHandle& plan) {
  switch (plan_backend(plan)) {
    case DILATTN_BACKEND_CUDA: return ShardPlace::gpu;
    case DILATTN_BACKEND_EMU: return ShardPlace::emulated_device;
    default: return ShardPlace::host;
  }
}

// The full tensors go to the GPU for a single-device cuda run; a ring keeps them on the host
// and moves each rank's rows instead (ring_run.h).
bool full_tensors_on_gpu(const PlanHandle& plan, const RingOptions& ring) {
  return plan_backend(plan) == DILATTN_BACKEND_CUDA && !ring.any();
}

// Ring attention gives rank p rows [p*N/P, (p+1)*N/P) of Q, K and V alike (SPEC 5), so K and V
// need Q's row count; refused here, before any rank's rows are copied (shard_copy.h copies
// every operand's rows by the same Rows).
void check_ring_rows(const Settings& s, const Operands& o) {
  if (!s.ring.any() || o.Nk == o.Nq) return;
  fail_input(std::string("flag ") + (s.ring.mpi ? "--ring mpi" : "--ring-threads") +
             ": ring attention needs K and V with Q's row count (SPEC 5); " + s.k_path + " has " +
             std::to_string(o.Nk) + " rows, " + s.q_path + " has " + std::to_string(o.Nq));
}

// The mask file of --mask, read on rank 0 (under --ring mpi it reaches the other ranks in
// share_operands).
void load_mask_file(const Settings& s, const Operands& o, MaskHandle* mask) {
  if (!s.mask_path.empty()) load_mask_npz(s.mask_path, o.Nq, o.Nk, s.block_q, s.block_k, mask);
}

// Under --ring mpi the ranks other than 0 know the operands' dtypes and shapes only (and the
// mask of --mask).
void share_operands(const MpiWorld& world, const Settings& s, Operands* o, MaskHandle* mask) {
  world.share_header(&o->q);
  world.share_header(&o->k);
  world.share_header(&o->v);
  set_dims(o);
  if (!s.mask_path.empty()) world.share_mask(mask, o->Nq, o->Nk, s.block_q, s.block_k);
}

// ---------------------------------------------------------------- tensors

// Binds host arrays as tensors, through GPU copies when the plan runs on cuda.
class Binder {
 public:
  explicit Binder(bool on_gpu) : on_gpu_(on_gpu) {}

  dilattn_tensor input(NpyArray& a, dilattn_dtype dtype, int64_t d3 = 0) {
    return bind(a, dtype, d3, true);
  }
  dilattn_tensor output(NpyArray& a, dilattn_dtype dtype, int64_t d3 = 0) {
    return bind(a, dtype, d3, false);
  }
  // Copies every output back from the GPU (nothing to do on the CPU).
  void finish() {
    for (auto& [buffer, host] : outputs_) buffer->download(host->data.data());
  }

 private:
  // d3 = 0: a 4-D array as is; d3 = 1: a 3-D LSE array [B, H, N] viewed as [B, H, N, 1].
  dilattn_tensor bind(NpyArray& a, dilattn_dtype dtype, int64_t d3, bool upload) {
    const int64_t dims[4] = {a.shape[0], a.shape[1], a.shape[2], d3 ? 1 : a.shape[3]};
    void* data = a.data.data();
    if (on_gpu_) {
      buffers_.push_back(std::make_unique<DeviceBuffer>(a.data.size()));
      if (upload) buffers_.back()->upload(a.data.data());
      else outputs_.push_back({buffers_.back().get(), &a});
      data = buffers_.back()->get();
    }
    dilattn_tensor t = dilattn_tensor_contiguous(data, dtype, dims[0], dims[1], dims[2], dims[3]);
    if (on_gpu_) {
      t.device = DILATTN_DEVICE_CUDA;
      t.device_index = 0;
    }
    return t;
  }

  bool on_gpu_;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers_;
  std::vector<std::pair<DeviceBuffer*, NpyArray*>> outputs_;
};

// A zero array; with `allocate` false (ranks of --ring mpi other than 0) its shape alone.
NpyArray zeros(NpyType type, std::vector<int64_t> shape, bool allocate = true) {
  NpyArray a;
  a.type = type;
  a.shape = std::move(shape);
  if (allocate) a.data.assign(static_cast<size_t>(a.numel()) * npy_itemsize(a.type), 0);
  return a;
}

// O and LSE of the forward pass, LSE in the precision the plan computes it in: f64 on ref and
// for f64 inputs, else f32.
void run_forward(const MpiWorld& world, const PlanHandle& plan, const Settings& s, Operands& o,
                 NpyArray* out, NpyArray* lse) {
  const RingOptions& ring = s.ring;
  const bool f64_lse = plan_backend(plan) == DILATTN_BACKEND_REF || o.dtype == DILATTN_F64;
  world.on_root([&] {
    *out = zeros(o.q.type, o.q.shape);
    *lse = zeros(f64_lse ? NpyType::f8 : NpyType::f4, {o.B, o.H, o.Nq});
  });
  if (!world.root()) {
    *out = zeros(o.q.type, o.q.shape, false);
    *lse = zeros(f64_lse ? NpyType::f8 : NpyType::f4, {o.B, o.H, o.Nq}, false);
  }
  Binder bind(full_tensors_on_gpu(plan, ring));
  const dilattn_tensor tq = bind.input(o.q, o.dtype), tk = bind.input(o.k, o.dtype),
                       tv = bind.input(o.v, o.dtype), to = bind.output(*out, o.dtype),
                       tl = bind.output(*lse, f64_lse ? DILATTN_F64 : DILATTN_F32, 1);
  dilattn_call_options call = s.call();
  const dilattn_call_options* options = s.needs_options() ? &call : nullptr;
  if (ring.mpi)
    ring_forward_mpi(world, plan.get(), ring, tq, tk, tv, to, tl, options);
  else if (ring.ranks > 0)
    ring_forward(plan.get(), ring, shard_place(plan), tq, tk, tv, to, tl, options);
  if (!ring.any()) {
    ProgressLine line("forward", s.progress, s.progress_after);
    if (line.attach(&call)) options = &call;
    check_call(dilattn_forward_ex(plan.get(), &tq, &tk, &tv, &to, &tl, options, nullptr, 0),
               "forward");
  }
  bind.finish();
}

}  // namespace

// ---------------------------------------------------------------- forward

int cmd_forward(int argc, char** argv, int first) {
  const Flags f(argc, argv, first,
                with_common({{"out", true}, {"lse", true}}), 0);
  const Settings s = parse_settings(f);
  check_launch(s);
  const MpiWorld world("forward", s.ring);  // --ring mpi: files on rank 0 only (ring_mpi.h)
  world.agree_on_command(f.values());
  OutputFiles outputs;
  const bool want_lse = f.has("lse");
  size_t out_file = 0, lse_file = 0;
  Operands o;
  MaskHandle mask;
  world.on_root([&] {
    note_inputs(s, &outputs);
    out_file = outputs.reserve("out", f.required("out"));
    if (want_lse) lse_file = outputs.reserve("lse", f.required("lse"));
    o = read_operands(s);
    check_ring_rows(s, o);
    load_mask_file(s, o, &mask);
  });
  share_operands(world, s, &o, &mask);
  PlanHandle plan;
  world.together([&] {  // a rank may fail alone here, e.g. out of memory
    make_plan(s, o, mask, &plan);
    check_ring_backend(s, plan);
  });
  NpyArray out, lse;
  run_forward(world, plan, s, o, &out, &lse);
  if (!world.root()) return kExitOk;
  outputs.write(out_file, serialize_npy(out));
  if (want_lse) outputs.write(lse_file, serialize_npy(lse));
  outputs.commit();
  return kExitOk;
}

// ---------------------------------------------------------------- backward

int cmd_backward(int argc, char** argv, int first) {
  const Flags f(argc, argv, first,
                with_common({{"do", true}, {"dq", true}, {"dk", true}, {"dv", true},
                             {"o", true}, {"lse", true}, {"d-sinks", true}}),
                0);
  const Settings s = parse_settings(f);
  const std::string do_path = f.required("do");
  if (f.has("o") != f.has("lse"))
    fail_input(std::string("flag --") + (f.has("o") ? "o" : "lse") + " needs --" +
               (f.has("o") ? "lse" : "o") + " (give both, or neither to recompute them)");
  check_launch(s);
  if (f.has("d-sinks") && s.sinks.empty()) fail_input("flag --d-sinks needs --sinks");
  const MpiWorld world("backward", s.ring);  // --ring mpi: files on rank 0 only (ring_mpi.h)
  world.agree_on_command(f.values());
  OutputFiles outputs;
  size_t dq_file = 0, dk_file = 0, dv_file = 0, d_sinks_file = 0;
  Operands o;
  MaskHandle mask;
  NpyArray d_o, out, lse;
  world.on_root([&] {
    note_inputs(s, &outputs);
    outputs.note_input("do", do_path);
    for (const char* name : {"o", "lse"})
      if (f.has(name)) outputs.note_input(name, f.required(name));
    dq_file = outputs.reserve("dq", f.required("dq"));
    dk_file = outputs.reserve("dk", f.required("dk"));
    dv_file = outputs.reserve("dv", f.required("dv"));
    if (f.has("d-sinks")) d_sinks_file = outputs.reserve("d-sinks", f.required("d-sinks"));
    o = read_operands(s);
    check_ring_rows(s, o);
    load_mask_file(s, o, &mask);
    d_o = read_operand(do_path, "do", &o.q);
    require_shape(d_o, do_path, o.q.shape, "dO must have Q's shape");
    if (f.has("o")) {
      const std::string o_path = f.required("o"), lse_path = f.required("lse");
      out = read_operand(o_path, "o", &o.q);
      require_shape(out, o_path, o.q.shape, "O must have Q's shape");
      lse = read_npy_file(lse_path);
      if (lse.type != NpyType::f4 && lse.type != NpyType::f8)
        fail_input(lse_path + ": dtype " + npy_descr(lse.type) + ", LSE must be <f4 or <f8");
      require_shape(lse, lse_path, {o.B, o.H, o.Nq}, "LSE is [B, H, Nq]");
    }
  });
  share_operands(world, s, &o, &mask);
  world.share_header(&d_o);
  PlanHandle plan;
  world.together([&] {  // a rank may fail alone here, e.g. out of memory
    make_plan(s, o, mask, &plan);
    check_ring_backend(s, plan);
  });

  if (f.has("o")) {
    world.share_header(&out);
    world.share_header(&lse);
  } else {
    run_forward(world, plan, s, o, &out, &lse);  // SPEC 6 needs the forward's O and LSE
  }

  NpyArray dq = zeros(o.q.type, o.q.shape, false), dk = zeros(o.k.type, o.k.shape, false),
           dv = zeros(o.v.type, o.v.shape, false);
  world.on_root([&] {
    dq = zeros(o.q.type, o.q.shape);
    dk = zeros(o.k.type, o.k.shape);
    dv = zeros(o.v.type, o.v.shape);
  });
  Binder bind(full_tensors_on_gpu(plan, s.ring));
  const dilattn_dtype lse_dtype = lse.type == NpyType::f8 ? DILATTN_F64 : DILATTN_F32;
  const dilattn_tensor tq = bind.input(o.q, o.dtype), tk = bind.input(o.k, o.dtype),
                       tv = bind.input(o.v, o.dtype), to = bind.input(out, o.dtype),
                       tl = bind.input(lse, lse_dtype, 1), tdo = bind.input(d_o, o.dtype),
                       tdq = bind.output(dq, o.dtype), tdk = bind.output(dk, o.dtype),
                       tdv = bind.output(dv, o.dtype);
  std::vector<double> d_sinks(s.sinks.size(), 0.0);
  dilattn_call_options call = s.call();
  if (f.has("d-sinks")) call.d_sinks = d_sinks.data();  // SPEC 10.3
  const dilattn_call_options* options = s.needs_options() ? &call : nullptr;
  if (s.ring.mpi)
    ring_backward_mpi(world, plan.get(), s.ring, tq, tk, tv, to, tl, tdo, tdq, tdk, tdv, options);
  else if (s.ring.ranks > 0)
    ring_backward(plan.get(), s.ring, shard_place(plan), tq, tk, tv, to, tl, tdo, tdq, tdk, tdv,
                  options, o.H);
  if (!s.ring.any()) {
    ProgressLine line("backward", s.progress, s.progress_after);
    if (line.attach(&call)) options = &call;
    check_call(dilattn_backward_ex(plan.get(), &tq, &tk, &tv, &to, &tl, &tdo, &tdq, &tdk, &tdv,
                                   options, nullptr, 0),
               "backward");
  }
  bind.finish();
  if (!world.root()) return kExitOk;
  outputs.write(dq_file, serialize_npy(dq));
  outputs.write(dk_file, serialize_npy(dk));
  outputs.write(dv_file, serialize_npy(dv));
  if (f.has("d-sinks")) {
    NpyArray ds = zeros(NpyType::f8, {static_cast<int64_t>(d_sinks.size())});
    std::memcpy(ds.data.data(), d_sinks.data(), d_sinks.size() * sizeof(double));
    outputs.write(d_sinks_file, serialize_npy(ds));
  }
  outputs.commit();
  return kExitOk;
}

}  // namespace dilattn_cli
