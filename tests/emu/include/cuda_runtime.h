/*
 * cuda_runtime.h (pdit's CUDA emulation) - the part of CUDA's runtime the
 * CUDA backend calls, for building src/backend/cuda against
 * tests/emu/cuda_emu_runtime.c instead of a GPU: device memory is host
 * memory the emulation hands out and tracks, a stream runs each operation
 * when it is queued, kernels run on the CPU (cuda_emu.h). Every name is
 * renamed to pd_emu_* so that a program may link the real CUDA libraries
 * beside it (NCCL's communicator does).
 */
#ifndef PD_EMU_CUDA_RUNTIME_H
#define PD_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidDevice = 101,
} cudaError_t;

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
};

typedef enum cudaDataType_t {
	CUDA_R_32F = 0,
	CUDA_R_16BF = 14,
} cudaDataType;

typedef struct pd_emu_stream *cudaStream_t;
#define cudaStreamNonBlocking 0x01

struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem;
	int major, minor;
};

#define cudaMalloc pd_emu_cudaMalloc
#define cudaFree pd_emu_cudaFree
#define cudaMallocHost pd_emu_cudaMallocHost
#define cudaFreeHost pd_emu_cudaFreeHost
#define cudaMemcpy pd_emu_cudaMemcpy
#define cudaMemcpyAsync pd_emu_cudaMemcpyAsync
#define cudaMemcpy2DAsync pd_emu_cudaMemcpy2DAsync
#define cudaStreamCreateWithFlags pd_emu_cudaStreamCreateWithFlags
#define cudaStreamDestroy pd_emu_cudaStreamDestroy
#define cudaStreamSynchronize pd_emu_cudaStreamSynchronize
#define cudaGetLastError pd_emu_cudaGetLastError
#define cudaGetErrorString pd_emu_cudaGetErrorString
#define cudaGetDeviceCount pd_emu_cudaGetDeviceCount
#define cudaGetDeviceProperties pd_emu_cudaGetDeviceProperties
#define cudaSetDevice pd_emu_cudaSetDevice
#define cudaGetDevice pd_emu_cudaGetDevice

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			      enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaGetLastError(void);
const char *cudaGetErrorString(cudaError_t e);
cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int *device);

/* Whether [P, P + BYTES) lies in one live device allocation. */
int pd_emu_is_device(const void *p, size_t bytes);
/* A launch a GPU refuses (no threads, more than 1024 a block, a grid's y or
 * z above 65535): the next cudaGetLastError says so. */
void pd_emu_launch_failed(const char *kernel);

#ifdef __cplusplus
}
#include "cuda_emu.h"
#endif

#endif
