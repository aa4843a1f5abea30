/*
 * pd_qwen.h - Qwen-Image (diffusers' QwenImagePipeline): its transformer
 * is FLUX's double-stream block in Qwen-Image's names (pd_flux.c, its
 * config's qwen layout), its VAE Wan2.1's on one frame, its text encoder a
 * language model (pd_llm.h) behind Qwen2's tokenizer and the pipeline's
 * template. This family's record says where each piece is.
 */
#ifndef PD_QWEN_H
#define PD_QWEN_H

#include "pd_dit.h"

extern const struct pd_dit_family pd_qwen_family;

#endif /* PD_QWEN_H */
