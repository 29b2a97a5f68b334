// gpu_bench_stub_runtime.cpp - a stand-in for the CUDA runtime and the dilattn C API that lets
// bench_gpu's main() (gpu_bench.cpp) run on a machine without a GPU, so its timing rules and its
// JSON are tested in CI (test_gpu_bench_stub.py): how many calls each row times under
// --iters and --row-budget-ms, what a run killed part-way leaves, how a failed row is written.
//
// The "kernels" sleep: a forward call STUB_FORWARD_MS (default 1), a backward call
// STUB_BACKWARD_MS (default 10) times D / 64, three times that for f32. CUDA events read the
// host's steady clock, so cudaEventElapsedTime measures the sleeps. STUB_SPARSE_FAILS makes every
// block-sparse forward fail with a message holding a quote and a newline (the JSON must escape
// them); STUB_NO_BACKEND makes the cuda backend unavailable (bench_gpu's "no GPU" path). The
// device is named with a quote and a backslash for the same reason. A plan with dropout or sinks
// (bench_gpu --options) refuses the plain calls and an _ex call without the options it needs,
// as the library does (docs/spec.md sections 10.3 and 11.2), and counts the offsets it saw.
// Nothing here is thread-safe: bench_gpu calls it from one thread.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dilattn.h"

namespace {

double env_ms(const char* name, double fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::atof(text) : fallback;
}

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(ms * 1000)));
}

enum class StubKind { dense, dilated, block_sparse };

const char* stub_error = "";

}  // namespace

struct dilattn_desc_s {
  StubKind kind = StubKind::dense;
  bool dropout = false, sinks = false;
};
struct dilattn_plan_s {
  StubKind kind;
  int64_t head_dim;
  dilattn_dtype dtype;
  bool dropout, sinks;
  uint64_t last_offset;  // the dropout offset of the plan's last forward
};

namespace {

// What the library answers a call on `plan` with `options` (NULL: a plain call).
dilattn_status check_call(dilattn_plan plan, const dilattn_call_options* options) {
  if (plan->dropout && options == nullptr) {
    stub_error = "the plan has dropout p = 0.1: call dilattn_forward_ex";
    return DILATTN_ERROR_INVALID_VALUE;
  }
  if (plan->sinks && (options == nullptr || options->sinks == nullptr)) {
    stub_error = "the plan has sinks: pass sinks in dilattn_call_options";
    return DILATTN_ERROR_INVALID_VALUE;
  }
  if (plan->dropout) {
    if (options->dropout_offset == plan->last_offset) {
      stub_error = "the same dropout offset twice";
      return DILATTN_ERROR_INVALID_VALUE;
    }
    plan->last_offset = options->dropout_offset;
  }
  return DILATTN_SUCCESS;
}

// A forward (options NULL: the plain call): STUB_SPARSE_FAILS' failure, the refusals of
// check_call, else STUB_FORWARD_MS of sleep.
dilattn_status forward_call(dilattn_plan plan, const dilattn_call_options* options) {
  if (plan->kind == StubKind::block_sparse && std::getenv("STUB_SPARSE_FAILS") != nullptr) {
    stub_error = "mask \"local:2\" refused\n(stub)";
    return DILATTN_ERROR_INVALID_VALUE;
  }
  const dilattn_status s = check_call(plan, options);
  if (s != DILATTN_SUCCESS) return s;
  sleep_ms(env_ms("STUB_FORWARD_MS", 1));
  return DILATTN_SUCCESS;
}

// A backward: the plain call refused on a plan with dropout or sinks, an _ex call without the
// sinks on a sinks plan; else STUB_BACKWARD_MS times D / 64 (three times that for f32). The
// backward takes the forward's offset, so the offset is not checked here.
dilattn_status backward_call(dilattn_plan plan, const dilattn_call_options* options) {
  if (options == nullptr && (plan->dropout || plan->sinks)) {
    stub_error = "the plan has dropout or sinks: call dilattn_backward_ex";
    return DILATTN_ERROR_INVALID_VALUE;
  }
  if (plan->sinks && (options == nullptr || options->sinks == nullptr)) {
    stub_error = "the plan has sinks: pass sinks in dilattn_call_options";
    return DILATTN_ERROR_INVALID_VALUE;
  }
  const double f32_factor = plan->dtype == DILATTN_F32 ? 3 : 1;
  sleep_ms(env_ms("STUB_BACKWARD_MS", 10) * static_cast<double>(plan->head_dim) / 64 * f32_factor);
  return DILATTN_SUCCESS;
}

}  // namespace
struct dilattn_mask_s {
  int unused;
};

extern "C" {

// ---------------------------------------------------------------- the CUDA runtime
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* props, int) {
  std::memset(props, 0, sizeof *props);
  std::strcpy(props->name, "Stub \"GPU\" \\ no device");
  props->major = 9;
  props->minor = 0;
  return cudaSuccess;
}
cudaError_t cudaMalloc(void** memory, size_t) {
  *memory = std::malloc(16);  // bench_gpu never touches the memory on the host
  return cudaSuccess;
}
cudaError_t cudaFree(void* memory) {
  std::free(memory);
  return cudaSuccess;
}
cudaError_t cudaMemset(void*, int, size_t) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* event) {
  *event = reinterpret_cast<cudaEvent_t>(new double(0));
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  delete reinterpret_cast<double*>(event);
  return cudaSuccess;
}
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t) {
  *reinterpret_cast<double*>(event) = now_ms();
  return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t stop) {
  *ms = static_cast<float>(*reinterpret_cast<double*>(stop) - *reinterpret_cast<double*>(start));
  return cudaSuccess;
}

// ---------------------------------------------------------------- the dilattn C API
int dilattn_backend_available(dilattn_backend) {
  return std::getenv("STUB_NO_BACKEND") != nullptr ? 0 : 1;
}
const char* dilattn_last_error(void) { return stub_error; }
dilattn_status dilattn_desc_create(dilattn_desc* desc) {
  *desc = new dilattn_desc_s;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_desc_destroy(dilattn_desc desc) {
  delete desc;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_desc_set_causal(dilattn_desc, int32_t) { return DILATTN_SUCCESS; }
dilattn_status dilattn_desc_set_dropout(dilattn_desc desc, double p) {
  desc->dropout = p > 0;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_desc_set_sinks(dilattn_desc desc, int32_t enabled) {
  desc->sinks = enabled != 0;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_desc_set_window(dilattn_desc, int64_t, int64_t) { return DILATTN_SUCCESS; }
dilattn_status dilattn_desc_set_softcap(dilattn_desc, double) { return DILATTN_SUCCESS; }
dilattn_status dilattn_desc_set_alibi(dilattn_desc, const double*, int64_t) {
  return DILATTN_SUCCESS;
}
dilattn_call_options dilattn_call_options_make(void) {
  dilattn_call_options options;
  std::memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  return options;
}
dilattn_status dilattn_desc_set_dilated(dilattn_desc desc, int32_t, const int64_t*,
                                        const int64_t*, dilattn_head_mode) {
  desc->kind = StubKind::dilated;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_desc_set_block_sparse(dilattn_desc desc, dilattn_mask) {
  desc->kind = StubKind::block_sparse;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_mask_from_pattern(dilattn_mask* mask, const char*, int64_t, int64_t,
                                         int64_t, int64_t) {
  *mask = new dilattn_mask_s;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_mask_destroy(dilattn_mask mask) {
  delete mask;
  return DILATTN_SUCCESS;
}
dilattn_shape dilattn_shape_make(int64_t, int64_t, int64_t, int64_t, int64_t, int64_t head_dim) {
  dilattn_shape shape;
  std::memset(&shape, 0, sizeof shape);
  shape.head_dim = head_dim;
  return shape;
}
dilattn_tensor dilattn_tensor_contiguous(void* data, dilattn_dtype dtype, int64_t, int64_t,
                                         int64_t, int64_t) {
  dilattn_tensor t;
  std::memset(&t, 0, sizeof t);
  t.data = data;
  t.dtype = dtype;
  return t;
}
dilattn_status dilattn_plan_create(dilattn_plan* plan, dilattn_desc desc,
                                   const dilattn_shape* shape, dilattn_dtype dtype,
                                   dilattn_backend) {
  *plan = new dilattn_plan_s{desc->kind, shape->head_dim, dtype, desc->dropout, desc->sinks, 0};
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_plan_destroy(dilattn_plan plan) {
  delete plan;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_plan_score_count(dilattn_plan, int64_t* score_terms) {
  *score_terms = 1000000000;
  return DILATTN_SUCCESS;
}
dilattn_status dilattn_forward(dilattn_plan plan, const dilattn_tensor*, const dilattn_tensor*,
                               const dilattn_tensor*, const dilattn_tensor*,
                               const dilattn_tensor*, void*, size_t) {
  return forward_call(plan, nullptr);
}
dilattn_status dilattn_forward_ex(dilattn_plan plan, const dilattn_tensor*, const dilattn_tensor*,
                                  const dilattn_tensor*, const dilattn_tensor*,
                                  const dilattn_tensor*, const dilattn_call_options* options,
                                  void*, size_t) {
  return forward_call(plan, options);
}
dilattn_status dilattn_backward(dilattn_plan plan, const dilattn_tensor*, const dilattn_tensor*,
                                const dilattn_tensor*, const dilattn_tensor*,
                                const dilattn_tensor*, const dilattn_tensor*,
                                const dilattn_tensor*, const dilattn_tensor*,
                                const dilattn_tensor*, void*, size_t) {
  return backward_call(plan, nullptr);
}
dilattn_status dilattn_backward_ex(dilattn_plan plan, const dilattn_tensor*,
                                   const dilattn_tensor*, const dilattn_tensor*,
                                   const dilattn_tensor*, const dilattn_tensor*,
                                   const dilattn_tensor*, const dilattn_tensor*,
                                   const dilattn_tensor*, const dilattn_tensor*,
                                   const dilattn_call_options* options, void*, size_t) {
  return backward_call(plan, options);
}

}  // extern "C"
