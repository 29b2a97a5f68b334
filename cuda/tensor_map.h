// tensor_map.h - makes the tensor map a TMA tile copy (cuda/tma_copy.cuh) reads: the host side.
//
//   encode_tensor_map_tiled(map, type, rank, address, dims, strides, box, element_strides,
//                           interleave, swizzle, l2_promotion, oob_fill)
//
// takes cuTensorMapEncodeTiled's arguments and returns its CUresult. Dimension 0 is the
// contiguous one; strides are in bytes for dimensions 1..rank-1 (multiples of 16); the box is
// at most 256 elements a dimension, its inner bytes a multiple of 16 and, when swizzled, equal
// to the swizzle span (32, 64 or 128 bytes; the emulator takes nothing smaller). Under nvcc the
// driver's cuTensorMapEncodeTiled is found once through the runtime's driver entry point, so
// nothing links libcuda; CUDA_ERROR_NOT_FOUND when the driver has none. Under the emulator it is
// simt::cuTensorMapEncodeTiled (emu/simt_tma.h), which checks the arguments as the driver API
// documents them and says why it refused in simt::last_tensor_map_error().
// Checked by tests/emu/test_emu_tma.cpp (emulator) and the nvcc build.
#ifndef DILATTN_TENSOR_MAP_H
#define DILATTN_TENSOR_MAP_H

#include "cuda_compat.cuh"

#ifdef __CUDACC__
#include <cuda.h>  // CUtensorMap and the encoder's types (nothing of the driver is linked)
#if CUDART_VERSION < 12000
#error "tensor maps need CUDA 12.0 or newer"
#endif
#else
#include "simt_tma.h"
#endif

namespace dilattn {
namespace DILATTN_BACKEND_NS {

#ifdef __CUDACC__
namespace detail {

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled with the CUDA 12.0 ABI, or null. The by-version lookup
// (CUDA 12.5+) pins that ABI; before it, the plain lookup gives the runtime's own version.
inline EncodeTiledFn driver_encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &found);
#else
    const cudaError_t e =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found);
#endif
    return e == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<EncodeTiledFn>(p)
               : nullptr;
  }();
  return fn;
}

}  // namespace detail
#endif

inline CUresult encode_tensor_map_tiled(CUtensorMap* map, CUtensorMapDataType type,
                                        cuuint32_t rank, void* address, const cuuint64_t* dims,
                                        const cuuint64_t* strides, const cuuint32_t* box,
                                        const cuuint32_t* element_strides,
                                        CUtensorMapInterleave interleave,
                                        CUtensorMapSwizzle swizzle,
                                        CUtensorMapL2promotion l2_promotion,
                                        CUtensorMapFloatOOBfill oob_fill) {
#ifdef __CUDACC__
  const detail::EncodeTiledFn encode = detail::driver_encode_tiled();
  if (encode == nullptr) return CUDA_ERROR_NOT_FOUND;
  return encode(map, type, rank, address, dims, strides, box, element_strides, interleave,
                swizzle, l2_promotion, oob_fill);
#else
  return simt::cuTensorMapEncodeTiled(map, type, rank, address, dims, strides, box,
                                      element_strides, interleave, swizzle, l2_promotion,
                                      oob_fill);
#endif
}

}  // namespace DILATTN_BACKEND_NS
}  // namespace dilattn

#endif  // DILATTN_TENSOR_MAP_H
