/*
 * pd_video.c - H.264 videos through libavformat / libavcodec / libswscale
 * (pd_video.h). A build without FFmpeg (-DPDIT_VIDEO=OFF: a machine that
 * only computes, such as the GPU check's) refuses video files and writes
 * frames as PNG.
 */
#include "pd_util.h"
#include "pd_video.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

int pd_video_is_video_name(const char *path)
{
	const char *dot = strrchr(path, '.');

	return dot && (strcasecmp(dot, ".mp4") == 0 || strcasecmp(dot, ".mkv") == 0 || strcasecmp(dot, ".mov") == 0);
}

static int pd_video_no_pipe(const char *path)
{
	return pd_errorf("cannot write %s: a video is written where it can be rewound (a file or /dev/null), not a pipe",
			 path);
}

int pd_video_out_check(const char *path)
{
	struct stat st;

	return pd_video_is_video_name(path) && stat(path, &st) == 0 && S_ISFIFO(st.st_mode) ? pd_video_no_pipe(path) : 0;
}

#ifndef PDIT_VIDEO
int pd_video_built(void)
{
	return 0;
}

void pd_video_quiet(void)
{
}

static int pd_video_none(const char *path)
{
	return pd_errorf("%s: this pdit was built without FFmpeg (-DPDIT_VIDEO=OFF): write the frames as PNG "
			 "(-o frame-%%03d.png)", path);
}

int pd_video_write(const char *path, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta)
{
	(void)rgb, (void)frames, (void)width, (void)height, (void)fps, (void)meta;
	return pd_video_none(path);
}

int pd_video_bytes(const char *name, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta, uint8_t **bytes, size_t *len)
{
	(void)rgb, (void)frames, (void)width, (void)height, (void)fps, (void)meta;
	*bytes = NULL;
	*len = 0;
	return pd_video_none(name);
}
#else
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswscale/swscale.h>

int pd_video_built(void)
{
	return 1;
}

void pd_video_quiet(void)
{
	av_log_set_level(AV_LOG_ERROR);
}

/* Where the muxer writes: the temporary file of pd_out, or memory (a
 * server's answer: no file to leave behind if the process is killed). It
 * seeks back to finish the MP4 header. */
struct pd_video_sink {
	struct pd_out_file *o;          /* the file, or NULL: memory */
	uint8_t *mem;                   /* the bytes so far (memory) */
	size_t len, cap, pos;           /* their count, the allocation, where the next write goes */
};

static int pd_video_write_cb(void *opaque, uint8_t *buf, int n)
{
	struct pd_video_sink *k = opaque;

	if (k->o)
		return pd_out_write(k->o, buf, (size_t)n) ? AVERROR(EIO) : n;
	if (k->pos + (size_t)n > k->cap) {
		size_t cap = k->cap ? k->cap : (size_t)1 << 20;
		uint8_t *m;

		while (cap < k->pos + (size_t)n)
			cap *= 2;
		if (!(m = realloc(k->mem, cap)))
			return AVERROR(ENOMEM);
		k->mem = m;
		k->cap = cap;
	}
	/* a seek past the end leaves a gap of zeros, as a file's would read */
	if (k->pos > k->len)
		memset(k->mem + k->len, 0, k->pos - k->len);
	memcpy(k->mem + k->pos, buf, (size_t)n);
	k->pos += (size_t)n;
	if (k->pos > k->len)
		k->len = k->pos;
	return n;
}

static int64_t pd_video_seek_cb(void *opaque, int64_t offset, int whence)
{
	struct pd_video_sink *k = opaque;
	FILE *f = k->o ? k->o->f : NULL;
	int64_t at;

	if (whence & AVSEEK_SIZE) {
		off_t here, end;

		if (!f)
			return (int64_t)k->len;
		here = ftello(f);
		if (fseeko(f, 0, SEEK_END))
			return AVERROR(EIO);
		end = ftello(f);
		return fseeko(f, here, SEEK_SET) ? AVERROR(EIO) : end;
	}
	whence &= ~AVSEEK_FORCE;
	if (f)
		return fseeko(f, offset, whence) ? AVERROR(EIO) : ftello(f);
	if (whence != SEEK_SET && whence != SEEK_CUR && whence != SEEK_END)
		return AVERROR(EINVAL);
	at = offset + (whence == SEEK_CUR ? (int64_t)k->pos : whence == SEEK_END ? (int64_t)k->len : 0);
	if (at < 0)
		return AVERROR(EINVAL);
	k->pos = (size_t)at;
	return at;
}

/* Sends FRAME (NULL: the end) and writes every packet the encoder has. */
static int pd_video_encode(AVFormatContext *fc, AVCodecContext *cc, AVStream *st, AVFrame *frame, AVPacket *pkt)
{
	int rc = avcodec_send_frame(cc, frame);

	while (rc >= 0) {
		rc = avcodec_receive_packet(cc, pkt);
		if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF)
			return 0;
		if (rc < 0)
			break;
		av_packet_rescale_ts(pkt, cc->time_base, st->time_base);
		pkt->stream_index = st->index;
		rc = av_interleaved_write_frame(fc, pkt);
	}
	return rc;
}

/* What the container and encoder need, before anything is opened: the
 * encoder, or NULL with a message naming PATH. */
static const AVCodec *pd_video_codec(const char *path, int frames, int width, int height, int fps)
{
	const AVCodec *codec = avcodec_find_encoder_by_name("libx264");

	if (!pd_video_is_video_name(path) || !av_guess_format(NULL, path, NULL)) {
		pd_errorf("%s: not a video name pdit writes (.mp4, .mkv, .mov)", path);
		return NULL;
	}
	if (!codec)
		codec = avcodec_find_encoder(AV_CODEC_ID_H264);
	if (!codec) {
		pd_errorf("%s: this FFmpeg has no H.264 encoder (Debian's libavcodec uses libx264)", path);
		return NULL;
	}
	if (frames < 1 || width < 2 || height < 2 || width % 2 || height % 2 || fps < 1) {
		pd_errorf("%s: %d frames of %dx%d at %d fps cannot be H.264 4:2:0 (even sizes)", path, frames, width,
			  height, fps);
		return NULL;
	}
	return codec;
}

/* The video into K, its container by PATH's extension; 0, or -1 with a
 * message naming PATH. */
static int pd_video_mux(const char *path, const AVCodec *codec, struct pd_video_sink *k, const uint8_t *rgb,
			int frames, int width, int height, int fps, const char *const *meta)
{
	const AVOutputFormat *of = av_guess_format(NULL, path, NULL);
	AVFormatContext *fc = NULL;
	AVCodecContext *cc = NULL;
	AVStream *st;
	AVFrame *fr = NULL;
	AVPacket *pkt = NULL;
	struct SwsContext *sws = NULL;
	unsigned char *iobuf = NULL;
	char err[128] = "";
	int rc = -1, av = 0;

	if ((av = avformat_alloc_output_context2(&fc, of, NULL, NULL)) < 0 || !(st = avformat_new_stream(fc, NULL)) ||
	    !(cc = avcodec_alloc_context3(codec)))
		goto fail;
	cc->width = width;
	cc->height = height;
	cc->time_base = (AVRational){ 1, fps };
	cc->framerate = (AVRational){ fps, 1 };
	cc->pix_fmt = AV_PIX_FMT_YUV420P;
	cc->gop_size = 2 * fps;
	/* no B-frames: every frame decodes where it stands, in every player */
	cc->max_b_frames = 0;
	/* one thread: the same frames give the same file */
	cc->thread_count = 1;
	if (fc->oformat->flags & AVFMT_GLOBALHEADER)
		cc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
	av_opt_set(cc->priv_data, "crf", "16", 0);
	av_opt_set(cc->priv_data, "preset", "medium", 0);
	if ((av = avcodec_open2(cc, codec, NULL)) < 0 || (av = avcodec_parameters_from_context(st->codecpar, cc)) < 0)
		goto fail;
	st->time_base = cc->time_base;
	for (int i = 0; meta && meta[i] && meta[i + 1]; i += 2)
		av_dict_set(&fc->metadata, meta[i], meta[i + 1], 0);
	iobuf = av_malloc(1 << 16);
	if (!iobuf || !(fc->pb = avio_alloc_context(iobuf, 1 << 16, 1, k, NULL, pd_video_write_cb, pd_video_seek_cb)))
		goto fail;
	iobuf = NULL; /* the context owns it */
	fc->flags |= AVFMT_FLAG_CUSTOM_IO;
	{
		/* MP4's edit list would end at the last frame's start and drop it
		 * from players: without one every frame plays its 1/fps */
		AVDictionary *opts = NULL;

		if (strcmp(fc->oformat->name, "mp4") == 0 || strcmp(fc->oformat->name, "mov") == 0)
			av_dict_set(&opts, "use_editlist", "0", 0);
		av = avformat_write_header(fc, &opts);
		av_dict_free(&opts);
		if (av < 0)
			goto fail;
	}
	sws = sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P,
			     SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, NULL, NULL, NULL);
	fr = av_frame_alloc();
	pkt = av_packet_alloc();
	if (!sws || !fr || !pkt)
		goto fail;
	fr->format = cc->pix_fmt;
	fr->width = width;
	fr->height = height;
	if ((av = av_frame_get_buffer(fr, 0)) < 0)
		goto fail;
	for (int i = 0; i < frames; i++) {
		const uint8_t *src[1] = { rgb + (size_t)i * height * width * 3 };
		int stride[1] = { 3 * width };

		if ((av = av_frame_make_writable(fr)) < 0)
			goto fail;
		sws_scale(sws, src, stride, 0, height, fr->data, fr->linesize);
		fr->pts = i;
		if ((av = pd_video_encode(fc, cc, st, fr, pkt)) < 0)
			goto fail;
	}
	if ((av = pd_video_encode(fc, cc, st, NULL, pkt)) < 0 || (av = av_write_trailer(fc)) < 0)
		goto fail;
	avio_flush(fc->pb);
	rc = 0;
fail:
	if (rc) {
		if (av < 0)
			av_strerror(av, err, sizeof(err));
		pd_errorf("%s: writing the video failed%s%s", path, err[0] ? ": " : "", err);
	}
	if (fc && fc->pb) {
		/* the context does not free its buffer (which may have been
		 * replaced by a larger one) */
		av_freep(&fc->pb->buffer);
		avio_context_free(&fc->pb);
	}
	av_free(iobuf);
	sws_freeContext(sws);
	av_frame_free(&fr);
	av_packet_free(&pkt);
	avcodec_free_context(&cc);
	avformat_free_context(fc);
	return rc;
}

int pd_video_write(const char *path, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta)
{
	const AVCodec *codec = pd_video_codec(path, frames, width, height, fps);
	struct pd_out_file o = { 0 };
	struct pd_video_sink k = { &o, NULL, 0, 0, 0 };

	if (!codec || pd_out_open(&o, path))
		return -1;
	/* the muxer goes back to write the sizes: a pipe cannot take that */
	if (!o.tmp && lseek(fileno(o.f), 0, SEEK_CUR) < 0) {
		pd_out_abort(&o);
		return pd_video_no_pipe(path);
	}
	if (pd_video_mux(path, codec, &k, rgb, frames, width, height, fps, meta)) {
		pd_out_abort(&o);
		return -1;
	}
	return pd_out_commit(&o);
}

int pd_video_bytes(const char *name, const uint8_t *rgb, int frames, int width, int height, int fps,
		   const char *const *meta, uint8_t **bytes, size_t *len)
{
	const AVCodec *codec = pd_video_codec(name, frames, width, height, fps);
	struct pd_video_sink k = { NULL, NULL, 0, 0, 0 };

	*bytes = NULL;
	*len = 0;
	if (!codec)
		return -1;
	if (pd_video_mux(name, codec, &k, rgb, frames, width, height, fps, meta)) {
		free(k.mem);
		return -1;
	}
	*bytes = k.mem;
	*len = k.len;
	return 0;
}
#endif /* PDIT_VIDEO */
