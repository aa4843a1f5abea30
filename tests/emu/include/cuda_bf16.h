/* cuda_bf16.h (pdit's CUDA emulation): the bf16 and half types are
 * cuda_emu.h's. */
#include "cuda_runtime.h"
