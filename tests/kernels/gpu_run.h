// gpu_run.h - an AttentionCase's forward and backward on the cuda backend: the inputs copied to
// the GPU, the outputs poisoned on the host (tensor.h) and copied up too, so an element the
// kernel forgets to write still fails the comparison, then everything copied back into the
// host tensors the checks read. The library takes device pointers for cuda plans and never
// allocates a caller's tensors, so the test does what any user program does.
// on_own_stream: the call goes through dilattn_forward_on_stream / dilattn_backward_on_stream
// on a stream this file creates (a caller's stream, as PyTorch hands one); else the plain call,
// or, with call options (SPEC 14.3: sinks and d_sinks in host memory), the _ex call.
// Built with the CUDA runtime where the build has CUDA (gpu_run.cpp); without it every call is
// a failed check saying so.
#ifndef DILATTN_TESTS_KERNELS_GPU_RUN_H
#define DILATTN_TESTS_KERNELS_GPU_RUN_H

#include "../common/attention_run.h"

namespace kgpu {

harness::Forward run_forward(const harness::AttentionCase& c, const harness::Inputs& in,
                             bool on_own_stream,
                             const dilattn_call_options* options = nullptr);
harness::Gradients run_backward(const harness::AttentionCase& c, const harness::Inputs& in,
                                const harness::Forward& fwd, bool on_own_stream,
                                const dilattn_call_options* options = nullptr);

}  // namespace kgpu

#endif  // DILATTN_TESTS_KERNELS_GPU_RUN_H
