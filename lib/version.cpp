// version.cpp - version, build information and small conveniences of the C ABI.
#include <cstdio>
#include <cstring>
#include <string>

#include "abi_enum.h"
#include "backend.h"
#include "dilattn.h"
#include "dilattn_config.h"

extern "C" int dilattn_version(void) { return DILATTN_VERSION; }

extern "C" dilattn_tensor dilattn_tensor_contiguous(void* data, dilattn_dtype dtype, int64_t d0,
                                                    int64_t d1, int64_t d2, int64_t d3) {
  dilattn_tensor t{};
  t.struct_size = sizeof(dilattn_tensor);
  t.data = data;
  std::memcpy(&t.dtype, &dtype, sizeof t.dtype);  // copied as bytes: checked when used (abi_enum.h)
  t.device = DILATTN_DEVICE_CPU;
  t.device_index = 0;
  t.shape[0] = d0; t.shape[1] = d1; t.shape[2] = d2; t.shape[3] = d3;
  t.strides[3] = 1;
  t.strides[2] = d3;
  t.strides[1] = d2 * d3;
  t.strides[0] = d1 * d2 * d3;
  return t;
}

extern "C" dilattn_shape dilattn_shape_make(int64_t batch, int64_t seqlen_q, int64_t seqlen_k,
                                            int64_t heads_q, int64_t heads_kv,
                                            int64_t head_dim) {
  dilattn_shape s{};
  s.struct_size = sizeof(dilattn_shape);
  s.batch = batch;
  s.seqlen_q = seqlen_q;
  s.seqlen_k = seqlen_k;
  s.heads_q = heads_q;
  s.heads_kv = heads_kv;
  s.head_dim = head_dim;
  return s;
}

extern "C" const char* dilattn_backend_name(dilattn_backend backend) {
  const int32_t id = dilattn::enum_value(backend);  // any int may arrive from C
  if (id == DILATTN_BACKEND_AUTO) return "auto";
  const dilattn::Backend* entry = dilattn::find_backend(id);
  return entry != nullptr ? entry->name : "unknown";
}

extern "C" int dilattn_backend_available(dilattn_backend backend) {
  const int32_t id = dilattn::enum_value(backend);  // any int may arrive from C
  if (id == DILATTN_BACKEND_AUTO) return 1;
  const dilattn::Backend* entry = dilattn::find_backend(id);
  if (entry == nullptr) return 0;
  dilattn::Problem probe;  // a tiny f32 problem: does the backend exist at all?
  probe.B = probe.Nq = probe.Nk = probe.H = probe.Hkv = 1;
  probe.D = 64;
  probe.scale = 0.125;
  probe.num_threads = 1;
  return entry->can_run(probe) == DILATTN_SUCCESS;
}

namespace {
std::string cpu_features() {
  std::string f;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("sse4.2")) f += " sse4.2";
  if (__builtin_cpu_supports("avx")) f += " avx";
  if (__builtin_cpu_supports("avx2")) f += " avx2";
  if (__builtin_cpu_supports("fma")) f += " fma";
  if (__builtin_cpu_supports("avx512f")) f += " avx512f";
  if (__builtin_cpu_supports("avx512bf16")) f += " avx512bf16";
  if (__builtin_cpu_supports("amx-bf16")) f += " amx-bf16";
#elif defined(__aarch64__)
  f += " neon";
#endif
  return f.empty() ? " (none detected)" : f;
}
}  // namespace

extern "C" const char* dilattn_cpu_isa(void) {
  const dilattn::Backend* cpu = dilattn::find_backend(DILATTN_BACKEND_CPU);
  const char* isa = cpu->code_variant != nullptr ? cpu->code_variant() : nullptr;
  return isa != nullptr ? isa : "none";
}

extern "C" const char* dilattn_build_info(void) {
  // Built once; function-local statics are initialised thread-safely.
  static const std::string info = [] {
    std::string s;
    s += "dilattn " + std::to_string(DILATTN_VERSION_MAJOR) + "." +
         std::to_string(DILATTN_VERSION_MINOR) + "." + std::to_string(DILATTN_VERSION_PATCH) + "\n";
    s += "backends built: ref";
    if (dilattn_backend_available(DILATTN_BACKEND_CPU)) s += " cpu";
    if (DILATTN_HAVE_CUDA) s += " cuda";
    if (dilattn_backend_available(DILATTN_BACKEND_EMU)) s += " emu";
    s += "\n";
    s += std::string("CUDA found at build: ") + (DILATTN_HAVE_CUDA ? "yes" : "no") + "\n";
    // "yes (sm_86)", or why the cuda backend is not used: "yes (sm_75), no kernel image for
    // it (kernels built for sm 80,90): cuda not used" (then AUTO runs on the CPU).
    const dilattn::Backend* cuda = dilattn::find_backend(DILATTN_BACKEND_CUDA);
    s += "GPU present: " + cuda->device_report() + "\n";
    s += std::string("NCCL found at build: ") + (DILATTN_HAVE_NCCL ? "yes" : "no") + "\n";
    s += std::string("MPI found at build: ") + (DILATTN_HAVE_MPI ? "yes" : "no") + "\n";
    s += "compiled for: " DILATTN_BUILD_FLAGS "\n";
    s += "CPU features:" + cpu_features() + "\n";
    s += std::string("cpu backend ISA: ") + dilattn_cpu_isa() + "\n";
    // What a backend computes in a narrower type than its inputs, said here, never silently.
    for (dilattn_backend id : {DILATTN_BACKEND_CUDA, DILATTN_BACKEND_CPU, DILATTN_BACKEND_EMU}) {
      const dilattn::Backend* b = dilattn::find_backend(id);
      if (b->narrower_compute != nullptr && dilattn_backend_available(id))
        s += std::string(b->name) + " backend precision: " + b->narrower_compute + "\n";
    }
    return s;
  }();
  return info.c_str();
}
