// kernels.h - the kernels as the launchers (launch.cu, launch_backward.cu) see them: for each
// kernel file, a function that returns its kernel for an input dtype and head dim together
// with what a launch needs to know of its tile (dynamic shared memory, rows per block, threads).
//
// Each function is defined, and explicitly instantiated for the dtypes the launchers use, in
// the kernel's own file, so every kernel file is a translation unit of its own and the
// launchers never see a kernel's body. The pointer a function returns is the kernel's host
// stub, which its own translation unit registers with the CUDA runtime: launching through it
// from the launchers needs no device linking (-rdc). Under the emulator it is the kernel
// itself, a host function.
//
// Which kernel a problem gets is kernel_choice.h's rule (forward_kernel_for,
// backward_kernel_for); the launchers call the function it names.
#ifndef DILATTN_KERNELS_H
#define DILATTN_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "backward_tile.cuh"  // BackwardParams, ForwardParams
#include "tensor_map.h"        // CUtensorMap

namespace dilattn {
namespace DILATTN_BACKEND_NS {

// ---------------------------------------------------------------- forward (SPEC 2-4)
using ForwardKernelFn = void (*)(ForwardParams);

struct ForwardKernel {
  ForwardKernelFn fn;
  size_t smem;     // dynamic shared memory per block, bytes
  int block_rows;  // query rows per block (one query tile)
  int threads;     // per block
};

// forward_simt.cu: T = float, __half, __nv_bfloat16; any D <= kMaxHeadDim. variants: the
// instance that runs SPEC 10.1's window, softcap and ALiBi and SPEC 10.3's sinks; dropout: the
// one that runs SPEC 11's dropout as well as those.
template <class T>
ForwardKernel simt_forward(int64_t D, bool variants = false, bool dropout = false);
// forward_mma.cu: T = __half, __nv_bfloat16; D = 64 or 128. variants: the instance that runs
// SPEC 10.1's window, softcap and ALiBi and SPEC 10.3's sinks (mma_variants.cuh); dropout: the
// one that runs SPEC 11's dropout (never both: kernel_choice.h sends such problems to SIMT).
template <class T>
ForwardKernel mma_forward(int64_t D, bool variants = false, bool dropout = false);
// forward_mma_tf32.cu (f32, 3xTF32): D = 64 or 128. variants, dropout: as mma_forward's.
ForwardKernel tf32_forward(int64_t D, bool variants = false, bool dropout = false);

// forward_wgmma.cu (sm_90a: wgmma, TMA, warp specialisation): T = __half, __nv_bfloat16;
// D = 64 or 128; the plain instance only. Its K and V arrive by TMA through tensor maps the
// launcher makes per launch: a span's keys are rows first + step * c, and map `first % step`
// (map 0 when step is 1) views K or V as the rows `step` apart from that residue, so a chunk is
// one box at row first / step + c0 (launch.cu, make_wgmma_tensor_maps). The stride is the
// map's row stride, not its element stride (elementStrides): a box spans at most 256 elements
// a dimension, traversal stride included, so element strides would hold a chunk of 128 keys
// to dilation 2, where row strides take any dilation up to kWgmmaMaxStep. Passed as a kernel
// parameter (__grid_constant__): 4 KB of maps beside ForwardParams, within the 32 KB of
// parameters CUDA 12.1 and newer take.
constexpr int kWgmmaMaxStep = 16;
struct WgmmaTensorMaps {
  CUtensorMap k[kWgmmaMaxStep];
  CUtensorMap v[kWgmmaMaxStep];
};
using WgmmaForwardKernelFn = void (*)(ForwardParams, const WgmmaTensorMaps);
struct WgmmaForwardKernel {
  WgmmaForwardKernelFn fn;
  size_t smem;
  int block_rows;
  int threads;
};
template <class T>
WgmmaForwardKernel wgmma_forward(int64_t D);
// Launches of forward_wgmma.cu by launch.cu so far, in this process: how the kernel tests know
// a call took the Hopper path (the launcher falls back to forward_mma.cu where no tensor map
// can be made).
uint64_t wgmma_launch_count();

// ---------------------------------------------------------------- backward (SPEC 6)
using BackwardKernelFn = void (*)(BackwardParams);

// The two kernels of a backward: the dQ pass and the dK/dV pass.
struct BackwardKernels {
  BackwardKernelFn dq, dkdv;
  size_t dq_smem, dkdv_smem;   // dynamic shared memory per block, bytes
  int block_rows, block_keys;  // query rows and keys per chunk
  int threads;                 // per block
  // The dK/dV kernel walks every query head of its kv head in one launch when asked
  // (BackwardParams::head_in_group < 0); the launcher asks where key tiles do not depend on the
  // head (dense, block-sparse) and, where dkdv_dilated_heads, on dilated branches too (a block
  // per key tile and head, the first head of each offset walking the heads of that offset). The
  // tensor-core variant instances do not walk dilated heads: the walk would spill their
  // registers at D = 128. The SIMT kernels walk them in every instance.
  bool dkdv_all_heads = false;
  bool dkdv_dilated_heads = false;
};

// backward_simt.cu: T = float, __half, __nv_bfloat16; any D <= kMaxHeadDim. variants and
// dropout: as simt_forward's.
template <class T>
BackwardKernels simt_backward(int64_t D, bool variants = false, bool dropout = false);
// backward_mma.cu: T = __half, __nv_bfloat16; D = 64 or 128. variants, dropout: as
// mma_forward's.
template <class T>
BackwardKernels mma_backward(int64_t D, bool variants = false, bool dropout = false);
// backward_mma_tf32.cu (f32, 3xTF32): D = 64 or 128. variants, dropout: as mma_forward's.
BackwardKernels tf32_backward(int64_t D, bool variants = false, bool dropout = false);

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_KERNELS_H
