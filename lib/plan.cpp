// plan.cpp - dilattn_plan_create: every SPEC 7 check on the description and the shapes, done
// once, so forward and backward only check the tensors against the plan.
#include <cmath>
#include <cstdlib>
#include <limits>
#include <thread>

#include "abi_enum.h"
#include "errors.h"
#include "handles.h"
#include "pool_internal.h"

using dilattn::set_error;

namespace {

// a * b, or false when it overflows int64.
bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

int32_t resolve_threads(int32_t requested) {
  if (requested > 0) return requested;
  if (const char* env = std::getenv("DILATTN_NUM_THREADS")) {
    const long n = std::strtol(env, nullptr, 10);
    if (n > 0 && n < 4096) return static_cast<int32_t>(n);
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int32_t>(hw) : 1;
}

dilattn_status check_sizes(const dilattn::Problem& p) {
  struct Dim { const char* name; int64_t value; };
  const Dim dims[] = {{"batch", p.B}, {"seqlen_q", p.Nq}, {"seqlen_k", p.Nk},
                      {"heads_q", p.H}, {"heads_kv", p.Hkv}, {"head_dim", p.D}};
  for (const Dim& d : dims)
    if (d.value < 1)
      return set_error(DILATTN_ERROR_INVALID_VALUE, "argument '%s' = %lld: must be >= 1", d.name,
                       static_cast<long long>(d.value));
  // Bytes of the largest tensor, in f64, must fit: every later offset is then safe.
  int64_t n = 8;
  const int64_t factors_q[] = {p.B, p.Nq, p.H, p.D};
  const int64_t factors_k[] = {p.B, p.Nk, p.Hkv, p.D};
  for (const int64_t* f : {factors_q, factors_k}) {
    n = 8;
    for (int i = 0; i < 4; ++i)
      if (!mul_ok(n, f[i], &n))
        return set_error(DILATTN_ERROR_SIZE_OVERFLOW,
                         "shape B=%lld Nq=%lld Nk=%lld H=%lld Hkv=%lld D=%lld: bytes overflow int64",
                         static_cast<long long>(p.B), static_cast<long long>(p.Nq),
                         static_cast<long long>(p.Nk), static_cast<long long>(p.H),
                         static_cast<long long>(p.Hkv), static_cast<long long>(p.D));
  }
  if (p.H % p.Hkv != 0)
    return set_error(DILATTN_ERROR_HEADS_NOT_DIVISIBLE,
                     "heads_q = %lld is not a multiple of heads_kv = %lld",
                     static_cast<long long>(p.H), static_cast<long long>(p.Hkv));
  return DILATTN_SUCCESS;
}

dilattn_status check_kind(const dilattn::Problem& p) {
  if (p.kind == DILATTN_KIND_DILATED) {
    if (p.Nq != p.Nk)
      return set_error(DILATTN_ERROR_SEQLEN_MISMATCH,
                       "dilated attention needs seqlen_q == seqlen_k, got %lld and %lld",
                       static_cast<long long>(p.Nq), static_cast<long long>(p.Nk));
    if (p.head_mode == dilattn::kHeadsGroups && p.H < p.num_branches())
      return set_error(DILATTN_ERROR_GROUPS_TOO_FEW_HEADS,
                       "heads_q = %lld: groups mode needs at least one head per branch (%lld)",
                       static_cast<long long>(p.H), static_cast<long long>(p.num_branches()));
  }
  if (p.kind == DILATTN_KIND_BLOCK_SPARSE) {
    const dilattn::BsrMask& m = *p.mask;
    if (m.Nq != p.Nq || m.Nk != p.Nk)
      return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                       "mask built for Nq=%lld Nk=%lld, plan has seqlen_q=%lld seqlen_k=%lld",
                       static_cast<long long>(m.Nq), static_cast<long long>(m.Nk),
                       static_cast<long long>(p.Nq), static_cast<long long>(p.Nk));
    if (m.num_heads != 1 && m.num_heads != p.H)
      return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                       "mask has %lld heads, plan has heads_q=%lld (need 1 or H)",
                       static_cast<long long>(m.num_heads), static_cast<long long>(p.H));
  }
  return DILATTN_SUCCESS;
}

// SPEC 11.1: with dropout, every counter word of a score must fit 32 bits (the offset is
// checked per call, in dispatch.cpp).
dilattn_status check_dropout_bounds(const dilattn::Problem& p) {
  if (p.dropout_p == 0) return DILATTN_SUCCESS;
  const int64_t two32 = int64_t{1} << 32;
  if (p.Nq > two32)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "seqlen_q = %lld: dropout needs seqlen_q <= 2^32 (SPEC 11.1)",
                     static_cast<long long>(p.Nq));
  if ((p.Nk + 3) / 4 > two32)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "seqlen_k = %lld: dropout needs ceil(seqlen_k / 4) <= 2^32 (SPEC 11.1)",
                     static_cast<long long>(p.Nk));
  if (p.B > two32 / p.H)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "batch * heads_q = %lld * %lld: dropout needs batch * heads_q <= 2^32 "
                     "(SPEC 11.1)",
                     static_cast<long long>(p.B), static_cast<long long>(p.H));
  // SPEC 10.2: in a packed batch the draw's batch word is the sequence.
  if (p.num_seqs() > two32 / p.H)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "num_seqs * heads_q = %lld * %lld: dropout needs num_seqs * heads_q <= 2^32 "
                     "(SPEC 10.2, 11.1)",
                     static_cast<long long>(p.num_seqs()), static_cast<long long>(p.H));
  return DILATTN_SUCCESS;
}

// SPEC 10.2: a packed batch is one batch element whose offsets end at the plan's seqlens;
// dilated attention needs every sequence square, i.e. equal offsets.
dilattn_status check_packed(const dilattn::Problem& p) {
  if (!p.is_packed()) return DILATTN_SUCCESS;
  const int64_t n = p.num_seqs();
  if (p.B != 1)
    return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                     "batch = %lld: a packed batch (dilattn_desc_set_varlen) needs batch = 1, "
                     "its sequences lie along seqlen",
                     static_cast<long long>(p.B));
  const int64_t last_q = p.cu_seqlens_q.back(), last_k = p.cu_seqlens_k.back();
  if (last_q != p.Nq)
    return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                     "cu_seqlens_q[%lld] = %lld: the last offset must equal seqlen_q = %lld",
                     static_cast<long long>(n), static_cast<long long>(last_q),
                     static_cast<long long>(p.Nq));
  if (last_k != p.Nk)
    return set_error(DILATTN_ERROR_SHAPE_MISMATCH,
                     "cu_seqlens_k[%lld] = %lld: the last offset must equal seqlen_k = %lld",
                     static_cast<long long>(n), static_cast<long long>(last_k),
                     static_cast<long long>(p.Nk));
  if (p.kind == DILATTN_KIND_DILATED)
    for (int64_t b = 0; b < n; ++b) {
      const size_t x = static_cast<size_t>(b);
      const int64_t nq = p.cu_seqlens_q[x + 1] - p.cu_seqlens_q[x];
      const int64_t nk = p.cu_seqlens_k[x + 1] - p.cu_seqlens_k[x];
      if (nq != nk)
        return set_error(DILATTN_ERROR_SEQLEN_MISMATCH,
                         "packed sequence %lld: dilated attention needs seqlen_q == seqlen_k "
                         "per sequence, got %lld and %lld",
                         static_cast<long long>(b), static_cast<long long>(nq),
                         static_cast<long long>(nk));
    }
  return DILATTN_SUCCESS;
}

// SPEC 10.1: the ALiBi slopes are one per head or one per (batch element, head); in a packed
// batch (SPEC 10.2) one per (sequence, head).
dilattn_status check_variants(const dilattn::Problem& p) {
  const int64_t n = static_cast<int64_t>(p.alibi_slopes.size());
  if (n == 0 || n == p.H || n == p.B * p.H) return DILATTN_SUCCESS;
  if (p.is_packed()) {
    if (n / p.H == p.num_seqs() && n % p.H == 0) return DILATTN_SUCCESS;
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "ALiBi slopes: count = %lld, need heads_q = %lld (one per head) or "
                     "num_seqs * heads_q = %lld (one per packed sequence and head)",
                     static_cast<long long>(n), static_cast<long long>(p.H),
                     static_cast<long long>(p.num_seqs() * p.H));
  }
  return set_error(DILATTN_ERROR_INVALID_VALUE,
                   "ALiBi slopes: count = %lld, need heads_q = %lld (one per head) or "
                   "batch * heads_q = %lld (one per batch element and head)",
                   static_cast<long long>(n), static_cast<long long>(p.H),
                   static_cast<long long>(p.B * p.H));
}

}  // namespace

extern "C" dilattn_status dilattn_plan_create(dilattn_plan* plan, dilattn_desc desc,
                                              const dilattn_shape* shape, dilattn_dtype dtype,
                                              dilattn_backend backend) {
  DILATTN_ABI_BEGIN
  if (plan == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'plan' is NULL");
  dilattn_status s = dilattn::check_handle(desc, "desc");
  if (s != DILATTN_SUCCESS) return s;
  if (shape == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'shape' is NULL");
  if (shape->struct_size != sizeof(dilattn_shape))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'shape': struct_size = %zu, expected sizeof(dilattn_shape) = %zu "
                     "(fill it with dilattn_shape_make)",
                     shape->struct_size, sizeof(dilattn_shape));
  // Any int may arrive from C: both are read as integers before they are used as enums.
  const int32_t dtype_value = dilattn::enum_value(dtype);
  const int32_t backend_value = dilattn::enum_value(backend);
  if (dtype_value != DILATTN_F32 && dtype_value != DILATTN_F64 && dtype_value != DILATTN_F16 &&
      dtype_value != DILATTN_BF16)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'dtype' = %d is not a dtype",
                     static_cast<int>(dtype_value));
  const bool auto_backend = backend_value == DILATTN_BACKEND_AUTO;
  if (!auto_backend && dilattn::find_backend(backend_value) == nullptr)
    return set_error(DILATTN_ERROR_INVALID_VALUE, "argument 'backend' = %d is not a backend",
                     static_cast<int>(backend_value));

  dilattn::Problem p;
  p.B = shape->batch;
  p.Nq = shape->seqlen_q;
  p.Nk = shape->seqlen_k;
  p.H = shape->heads_q;
  p.Hkv = shape->heads_kv;
  p.D = shape->head_dim;
  p.dtype = dtype;
  p.kind = desc->kind;
  p.branches = desc->branches;
  p.head_mode = desc->head_mode;
  p.mask = desc->mask;
  p.causal = desc->causal;
  p.pool = desc->pool;
  p.dropout_p = desc->dropout_p;
  p.num_threads = resolve_threads(desc->num_threads);
  p.window_left = desc->window_left;
  p.window_right = desc->window_right;
  p.softcap = desc->softcap;
  p.alibi_slopes = desc->alibi_slopes;
  p.cu_seqlens_q = desc->cu_seqlens_q;
  p.cu_seqlens_k = desc->cu_seqlens_k;
  p.sinks = desc->sinks;
  if ((s = check_sizes(p)) != DILATTN_SUCCESS) return s;
  if ((s = check_kind(p)) != DILATTN_SUCCESS) return s;
  if ((s = check_packed(p)) != DILATTN_SUCCESS) return s;
  if ((s = check_dropout_bounds(p)) != DILATTN_SUCCESS) return s;
  if ((s = check_variants(p)) != DILATTN_SUCCESS) return s;
  p.scale = desc->has_scale ? desc->scale : 1.0 / std::sqrt(static_cast<double>(p.D));

  // AUTO takes the first backend of the table that can run the problem (a setting gone wrong,
  // INVALID_VALUE, stops it: backend_table.cpp); a named backend must be able to (its can_run
  // says why not).
  const dilattn::Backend* chosen = dilattn::find_backend(backend_value);
  s = auto_backend ? dilattn::resolve_auto_backend(p, &chosen)
                   : dilattn::backend_can_run(*chosen, p);
  if (s != DILATTN_SUCCESS) return s;
  p.backend = chosen->id;
  // What the backend keeps per plan (device copies of the mask), made once here.
  if (chosen->prepare != nullptr && (s = chosen->prepare(p)) != DILATTN_SUCCESS) return s;

  auto* made = new dilattn_plan_s();
  made->problem = std::move(p);
  made->backend = chosen;
  made->workspace = chosen->workspace_bytes(made->problem);
  // A backend's workspace starts on a 256-byte boundary (SPEC 14.6); a caller's may start
  // anywhere, so the size a call takes covers the bytes skipped before that boundary.
  for (size_t* bytes : {&made->workspace.forward, &made->workspace.backward})
    if (*bytes != 0) *bytes += dilattn::kWorkspaceAlignment - 1;
  *plan = made;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_plan_destroy(dilattn_plan plan) {
  DILATTN_ABI_BEGIN
  if (plan == nullptr) return DILATTN_SUCCESS;
  if (dilattn_status s = dilattn::release_handle(plan, "plan")) return s;
  delete plan;
  dilattn::release_finished_workspaces();  // SPEC 14.7: blocks whose stream work is done
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_plan_backend(dilattn_plan plan, dilattn_backend* backend) {
  DILATTN_ABI_BEGIN
  dilattn_status s = dilattn::check_handle(plan, "plan");
  if (s != DILATTN_SUCCESS) return s;
  if (backend == nullptr) return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'backend' is NULL");
  *backend = plan->problem.backend;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_plan_score_count(dilattn_plan plan, int64_t* score_terms) {
  DILATTN_ABI_BEGIN
  dilattn_status s = dilattn::check_handle(plan, "plan");
  if (s != DILATTN_SUCCESS) return s;
  if (score_terms == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "argument 'score_terms' is NULL");
  const int64_t count = dilattn::ref::score_count(plan->problem);
  if (count < 0)
    return set_error(DILATTN_ERROR_SIZE_OVERFLOW, "the plan's score count overflows int64");
  *score_terms = count;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}

extern "C" dilattn_status dilattn_plan_workspace_size(dilattn_plan plan, size_t* forward_bytes,
                                                      size_t* backward_bytes) {
  DILATTN_ABI_BEGIN
  dilattn_status s = dilattn::check_handle(plan, "plan");
  if (s != DILATTN_SUCCESS) return s;
  if (forward_bytes == nullptr && backward_bytes == nullptr)
    return set_error(DILATTN_ERROR_NULL_POINTER, "arguments 'forward_bytes' and 'backward_bytes' are both NULL");
  if (forward_bytes) *forward_bytes = plan->workspace.forward;
  if (backward_bytes) *backward_bytes = plan->workspace.backward;
  return DILATTN_SUCCESS;
  DILATTN_ABI_END
}
