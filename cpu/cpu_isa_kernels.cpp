// cpu_isa_kernels.cpp - the IsaKernels table of one target (cpu_isa.h): compiled once per
// target with cpu_forward.cpp and cpu_backward.cpp (cpu/meson.build), it names that
// compilation's entry points. Constant-initialised data only: no code of the target runs
// before cpu_isa_dispatch.cpp has checked the CPU has its instructions.
// Checked by tests/cpu/test_cpu_isa.cpp.
#include "cpu_isa_target.h"
#include "cpu_microkernel.h"
#include "cpu_tile_loop.h"
#include "cpu_workspace.h"

namespace dilattn::cpu::DILATTN_CPU_ISA_NS {

dilattn_status forward(const Problem& p, const ForwardArgs& a);    // cpu_forward.cpp
dilattn_status backward(const Problem& p, const BackwardArgs& a);  // cpu_backward.cpp

namespace {
// exp2v over an array, a vector at a time (the tail through a zero-padded vector).
template <class T>
void exp2_array(const T* x, T* y, int64_t n) {
  for (int64_t i = 0; i < n; i += kW<T>) {
    T in[kW<T>] = {}, out[kW<T>];
    std::memcpy(in, x + i, sizeof(T) * static_cast<size_t>(min_i64(kW<T>, n - i)));
    vstore(out, exp2v(vload(in)));
    std::memcpy(y + i, out, sizeof(T) * static_cast<size_t>(min_i64(kW<T>, n - i)));
  }
}
}  // namespace

extern const IsaKernels kKernels = {DILATTN_CPU_ISA_NAME, DILATTN_CPU_REQUIRED, kVecBytes,
                                    workspace_sizes,      forward,              backward,
                                    exp2_array<float>,    exp2_array<double>};

}  // namespace dilattn::cpu::DILATTN_CPU_ISA_NS
