/*
 * pd_wan_vae_int.h - the Wan VAE's decoder as loaded (pd_wan_vae.c) and
 * run (pd_wan_vae_decode.c). Private to model/wan.
 */
#ifndef PD_WAN_VAE_INT_H
#define PD_WAN_VAE_INT_H

#include "pd_backend.h"
#include "pd_vae.h"
#include "pd_wan_vae.h"

#define PD_WAN_MAX_UP 8
#define PD_WAN_MAX_RES 8

/* A causal convolution (WanCausalConv3d, VW:131-173): KT temporal taps of
 * a K x K convolution, 2 (KT / 2) frames of history in front. */
struct pd_cconv {
	int c_in, c_out, kt, k;         /* channels, temporal taps (1 or 3), spatial size (1 or 3) */
	struct pd_conv *tap[3];         /* tap[dt] multiplies frame t + dt - (kt - 1); the last has the bias */
	float *cache;                   /* backend [2][c_in][hw]: the last two frames given (kt 3) */
	int64_t cache_hw;               /* positions the cache is sized for (0: none yet) */
};

/* WanResidualBlock (VW:315-386) */
struct pd_wres {
	int c_in, c_out;                /* channels */
	float *g1, *g2;                 /* RMS gammas [c_in], [c_out] */
	struct pd_cconv conv1, conv2;   /* causal 3x3x3 */
	struct pd_cconv shortcut;       /* 1x1x1 when the channels change (c_out 0: none) */
};

/* An up block: residual blocks, then an upsampler (VW:269-299) */
struct pd_wup {
	int n_res;                      /* residual blocks */
	struct pd_wres res[PD_WAN_MAX_RES];
	int mode;                       /* 0 none, 2 spatial (upsample2d), 3 also temporal (upsample3d) */
	int c;                          /* the upsampler's channels in */
	struct pd_cconv time_conv;      /* upsample3d: (3, 1, 1), c -> 2c */
	struct pd_conv *resample;       /* 3x3, c -> c / 2, after the 2x upsample */
};

struct pd_wan_vae {
	struct pd_wan_vae_config cfg;   /* sizes and latent statistics */
	struct pd_backend *be;          /* compute (borrowed) */
	struct pd_cconv post_quant;     /* 1x1x1 */
	struct pd_cconv conv_in;        /* z -> top channels */
	struct pd_wres mid[2];          /* the mid block's residual blocks */
	int mid_c;                      /* their channels */
	float *attn_g;                  /* the mid attention's RMS gamma [mid_c] */
	struct pd_conv *to_qkv, *proj;  /* its 1x1 convolutions */
	struct pd_wup up[PD_WAN_MAX_UP];
	float *norm_out_g;              /* final RMS gamma */
	int out_c_in;                   /* conv_out's input channels */
	struct pd_cconv conv_out;       /* -> 3 channels */
	float *zero_bias;               /* host zeros for the taps without bias */
	struct pd_vae_hooks hooks;      /* the banded decode's seam (bands 1: the whole video here) */
};


#endif /* PD_WAN_VAE_INT_H */
