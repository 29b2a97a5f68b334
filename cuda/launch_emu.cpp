// launch_emu.cpp - the emu backend (DILATTN_BACKEND_EMU): cuda/launch.cu and its kernels,
// compiled by the host compiler against the SIMT emulator (emu/simt.h) into namespace
// dilattn::emu, so the CUDA backend's exact kernels and launcher run on a CPU: replay a case
// through the kernels, or step through one in gdb, without a GPU.
//
// Checked by tests/kernels/ (every kernel x dtype x kind against the reference).
#define DILATTN_BACKEND_NS emu
#include "launch.cu"
