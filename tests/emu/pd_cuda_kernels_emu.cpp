/* The CUDA backend's kernels compiled for the CPU (cuda_emu.h through the
 * emulation's cuda_runtime.h), for test_backend_emu. */
/* a host thread each: blocks of 64 threads (two warps still meet in every
 * block reduction), not 256 */
#define PD_THREADS 64
#include "pd_cuda_kernels.cu"
