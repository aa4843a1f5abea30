/* The CUDA backend's kernels compiled for the CPU (cuda_emu.h through the
 * emulation's cuda_runtime.h), for the programs pdit_cuda_emu_exe makes:
 * blocks of the GPU's 256 threads. */
#include "pd_cuda_kernels.cu"
