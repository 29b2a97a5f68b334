// call_options.cpp - the per-call options of dilattn_call_options, read and checked once for
// every entry point that takes them (dispatch.cpp, lib/ring/) (see call_options.h).
#include "call_options.h"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "errors.h"

namespace dilattn {

namespace {

// SPEC 14.3: the sizes of dilattn_call_options' earlier versions. The first ends at
// dropout_offset and reads as no sinks and no progress callback; the second ends at d_sinks
// and reads as no progress callback.
constexpr size_t kCallOptionsFirstSize = offsetof(dilattn_call_options, sinks);
constexpr size_t kCallOptionsSecondSize = offsetof(dilattn_call_options, progress);

}  // namespace

dilattn_status read_call_options(const Problem& p, const dilattn_call_options* options,
                                 const char* entry, bool backward, DropoutCall* dropout,
                                 SinksCall* sinks, ProgressCall* progress) {
  if (options == nullptr) {
    if (p.dropout_p > 0)
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "the plan has dropout p = %g: %s carries no seed; call %s_ex with "
                       "dilattn_call_options (dropout_seed, dropout_offset)",
                       p.dropout_p, entry, entry);
    if (p.sinks)
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "the plan has sinks: %s carries no sink values; call %s_ex with "
                       "dilattn_call_options.sinks (heads_q = %lld values)",
                       entry, entry, static_cast<long long>(p.H));
    return DILATTN_SUCCESS;
  }
  const size_t size = options->struct_size;
  if (size != sizeof(dilattn_call_options) && size != kCallOptionsSecondSize &&
      size != kCallOptionsFirstSize)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'options': struct_size = %zu, expected "
                     "sizeof(dilattn_call_options) = %zu (fill it with dilattn_call_options_make)",
                     options->struct_size, sizeof(dilattn_call_options));
  if (options->dropout_offset >= (uint64_t{1} << 32))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'options': dropout_offset = %llu: must be below 2^32 (SPEC 11.1)",
                     static_cast<unsigned long long>(options->dropout_offset));
  const bool has_sink_fields = size >= kCallOptionsSecondSize;
  const bool has_progress_fields = size == sizeof(dilattn_call_options);
  const ProgressCall callback =
      has_progress_fields ? ProgressCall{options->progress, options->progress_user} : ProgressCall{};
  if (callback.fn != nullptr && progress == nullptr)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'options': progress given, but %s takes no progress callback: "
                     "each rank works on its own thread or process (SPEC 14.11)",
                     entry);
  const double* values = has_sink_fields ? options->sinks : nullptr;
  double* d_values = has_sink_fields ? options->d_sinks : nullptr;
  if (p.sinks && values == nullptr)
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'options': sinks is NULL, but the plan has sinks "
                     "(dilattn_desc_set_sinks): %s needs heads_q = %lld values",
                     entry, static_cast<long long>(p.H));
  if (!p.sinks && (values != nullptr || d_values != nullptr))
    return set_error(DILATTN_ERROR_INVALID_VALUE,
                     "argument 'options': sinks or d_sinks given, but the plan has no sinks "
                     "(dilattn_desc_set_sinks(desc, 1) turns them on)");
  // SPEC 15's rule for host arrays: aligned to their f64 elements.
  const std::pair<const void*, const char*> arrays[] = {{values, "sinks"}, {d_values, "d_sinks"}};
  for (const auto& [array, name] : arrays)
    if (reinterpret_cast<uintptr_t>(array) % alignof(double) != 0)
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "argument 'options': %s = %p is not aligned to its 8-byte elements", name,
                       array);
  for (int64_t h = 0; values != nullptr && h < p.H; ++h)
    if (std::isnan(values[h]) || (values[h] > 0 && std::isinf(values[h])))
      return set_error(DILATTN_ERROR_INVALID_VALUE,
                       "argument 'options': sinks[%lld] = %g: a sink is finite or -inf",
                       static_cast<long long>(h), values[h]);
  *dropout = DropoutCall{options->dropout_seed, options->dropout_offset};
  *sinks = SinksCall{values, backward ? d_values : nullptr};
  if (progress != nullptr) *progress = callback;
  return DILATTN_SUCCESS;
}

}  // namespace dilattn
