/*
 * pd_comm_self.c - the communicator of a single process: every collective
 * is a copy (or nothing), and point-to-point transfers to oneself complete
 * on the matching receive.
 */
#include "pd_comm.h"
#include "pd_util.h"

#include <stdlib.h>
#include <string.h>

/* A send to oneself is held until the receive that matches it. */
struct pd_self_msg {
	const void *buf;                /* the sender's buffer (borrowed until wait) */
	size_t bytes;
	int tag;
	int pending;
};

struct pd_self_comm {
	struct pd_comm c;               /* the interface; must stay first */
	struct pd_self_msg msg;         /* at most one message in flight */
};

#define SELF(comm) ((struct pd_self_comm *)(comm))

static int pd_self_allreduce(struct pd_comm *c, void *buf, size_t n, enum pd_comm_type t, enum pd_comm_op op)
{
	(void)c; (void)buf; (void)n; (void)t; (void)op;
	return 0;
}

static int pd_self_allgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			      const size_t *recv_bytes)
{
	(void)c;
	if (recv_bytes[0] != send_bytes)
		return pd_errorf("allgatherv: size mismatch");
	if (send != recv)
		memmove(recv, send, send_bytes);
	return 0;
}

static int pd_self_iallgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			       const size_t *recv_bytes, struct pd_comm_req *req)
{
	req->active = 0;
	return pd_self_allgatherv(c, send, send_bytes, recv, recv_bytes);
}

static int pd_self_gatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			   const size_t *recv_bytes, int root)
{
	(void)root;
	return pd_self_allgatherv(c, send, send_bytes, recv, recv_bytes);
}

static int pd_self_alltoallv(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			     const size_t *recv_bytes)
{
	(void)c;
	if (recv_bytes[0] != send_bytes[0])
		return pd_errorf("alltoallv: size mismatch");
	if (send != recv)
		memmove(recv, send, send_bytes[0]);
	return 0;
}

static int pd_self_bcast(struct pd_comm *c, void *buf, size_t bytes, int root)
{
	(void)c; (void)buf; (void)bytes; (void)root;
	return 0;
}

static int pd_self_isend(struct pd_comm *c, const void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	struct pd_self_comm *s = SELF(c);

	if (peer != 0 || s->msg.pending)
		return pd_errorf("self communicator: unsupported send");
	s->msg.buf = buf;
	s->msg.bytes = bytes;
	s->msg.tag = tag;
	s->msg.pending = 1;
	req->active = 0;
	return 0;
}

static int pd_self_irecv(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	struct pd_self_comm *s = SELF(c);

	if (peer != 0 || !s->msg.pending || s->msg.tag != tag || s->msg.bytes != bytes)
		return pd_errorf("self communicator: receive without a matching send");
	memcpy(buf, s->msg.buf, bytes);
	s->msg.pending = 0;
	req->active = 0;
	return 0;
}

static int pd_self_wait(struct pd_comm *c, struct pd_comm_req *req)
{
	(void)c;
	req->active = 0;
	return 0;
}

static int pd_self_barrier(struct pd_comm *c)
{
	(void)c;
	return 0;
}

static int pd_self_split(struct pd_comm *c, int color, int key, struct pd_comm **out)
{
	(void)color; (void)key;
	if (pd_comm_self_new(out))
		return -1;
	(*out)->timeout_s = c->timeout_s;
	return 0;
}

static void pd_self_free(struct pd_comm *c)
{
	free(c);
}

static void pd_self_abort(struct pd_comm *c, int code)
{
	(void)c;
	exit(code);
}

static const struct pd_comm_ops pd_self_ops = {
	.name = "self",
	.allreduce = pd_self_allreduce,
	.allgatherv = pd_self_allgatherv,
	.iallgatherv = pd_self_iallgatherv,
	.gatherv = pd_self_gatherv,
	.alltoallv = pd_self_alltoallv,
	.bcast = pd_self_bcast,
	.isend = pd_self_isend,
	.irecv = pd_self_irecv,
	.wait = pd_self_wait,
	.barrier = pd_self_barrier,
	.split = pd_self_split,
	.free = pd_self_free,
	.abort = pd_self_abort,
};

int pd_comm_self_new(struct pd_comm **out)
{
	/* impl stays NULL, which is how pd_comm.c tells this communicator
	 * from MPI's. */
	struct pd_self_comm *s = pd_calloc(1, sizeof(*s), "communicator");
	struct pd_comm *c;

	if (!s)
		return -1;
	c = &s->c;
	c->ops = &pd_self_ops;
	c->rank = 0;
	c->size = 1;
	c->failed_rank = -1;
	*out = c;
	return 0;
}
