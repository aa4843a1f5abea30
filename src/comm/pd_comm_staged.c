/*
 * pd_comm_staged.c - a communicator over a backend's buffers when the
 * backend's memory is not host memory (a GPU's; the staged test backend's):
 * what an operation sends is copied into pinned host buffers, the host
 * communicator moves it, and what arrives is copied back. This is the one
 * place the parallel methods' device buffers meet MPI; a communicator that
 * takes device memory itself (NCCL's) needs no staging.
 *
 * Staging buffers are kept in a pool and reused, so a step after the first
 * allocates nothing; a non-blocking transfer holds its buffers until its
 * wait, where a receive is copied to the backend (DistriFusion keeps two
 * gathers of every layer in flight for a whole step: the pool grows to
 * what a step holds at once).
 */
#include "pd_comm_impl.h"
#include "pd_backend.h"
#include "pd_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct pd_stage_slot {
	void *p;                        /* pinned host memory */
	size_t cap;                     /* its bytes */
	int busy;                       /* held by an operation or a transfer in flight */
};

/* A non-blocking transfer in flight. */
struct pd_stage_pending {
	struct pd_comm_req inner;       /* the host communicator's request */
	int send_slot, recv_slot;       /* the slots it holds (-1: none) */
	void *dst;                      /* backend memory the received bytes go to at wait (NULL: a send) */
	size_t bytes;                   /* how many */
	int used;                       /* this record is in use */
};

struct pd_staged_comm {
	struct pd_comm c;               /* the interface; must stay first */
	struct pd_comm *inner;          /* the host communicator (borrowed) */
	struct pd_backend *be;          /* whose buffers it takes (borrowed) */
	struct pd_stage_slot *slot;     /* the pool */
	int n_slot;
	struct pd_stage_pending *pending; /* transfers in flight (records reused) */
	int n_pending;
};

#define STAGED(comm) ((struct pd_staged_comm *)(comm))

/* Frees slot I's memory. */
static void pd_stage_drop(struct pd_staged_comm *s, int i)
{
	if (s->slot[i].p) {
		if (s->be->ops->pinned_free)
			s->be->ops->pinned_free(s->be, s->slot[i].p);
		else
			free(s->slot[i].p);
	}
	s->slot[i].p = NULL;
	s->slot[i].cap = 0;
}

/* A free slot of at least BYTES (the largest free one grown, or a new one,
 * when none is large enough), or -1. */
static int pd_stage_get(struct pd_staged_comm *s, size_t bytes)
{
	int best = -1;

	for (int i = 0; i < s->n_slot; i++) {
		if (s->slot[i].busy)
			continue;
		if (s->slot[i].cap >= bytes) {
			s->slot[i].busy = 1;
			return i;
		}
		if (best < 0 || s->slot[i].cap > s->slot[best].cap)
			best = i;
	}
	if (best < 0) {
		struct pd_stage_slot *n = realloc(s->slot, sizeof(*n) * (size_t)(s->n_slot + 1));

		if (!n) {
			pd_errorf("out of memory for %s's staging buffers", s->c.name);
			return -1;
		}
		s->slot = n;
		best = s->n_slot++;
		memset(&s->slot[best], 0, sizeof(s->slot[best]));
	}
	pd_stage_drop(s, best);
	/* never empty, and a whole number of floats: the backend copies floats */
	bytes = (bytes + 63) & ~(size_t)63;
	if (!bytes)
		bytes = 64;
	s->slot[best].p = s->be->ops->pinned_alloc ? s->be->ops->pinned_alloc(s->be, bytes) : malloc(bytes);
	if (!s->slot[best].p) {
		pd_errorf("out of memory (%zu MB of staging buffers for %s)", bytes >> 20, s->c.name);
		return -1;
	}
	s->slot[best].cap = bytes;
	s->slot[best].busy = 1;
	return best;
}

static void pd_stage_put(struct pd_staged_comm *s, int i)
{
	if (i >= 0)
		s->slot[i].busy = 0;
}

/* Backend memory to host and back, in bytes (whole floats: every transfer
 * of the parallel methods is of floats or doubles). */
static int pd_stage_down(struct pd_staged_comm *s, void *host, const void *dev, size_t bytes)
{
	if (bytes % sizeof(float))
		return pd_errorf("%s: %zu bytes are no whole number of floats", s->c.name, bytes);
	if (bytes)
		s->be->ops->download(s->be, host, dev, bytes / sizeof(float));
	return pd_backend_check(s->be);
}

static int pd_stage_up(struct pd_staged_comm *s, void *dev, const void *host, size_t bytes)
{
	if (bytes % sizeof(float))
		return pd_errorf("%s: %zu bytes are no whole number of floats", s->c.name, bytes);
	if (bytes)
		s->be->ops->upload(s->be, dev, host, bytes / sizeof(float));
	return pd_backend_check(s->be);
}

static size_t pd_stage_total(const size_t *bytes, int n)
{
	size_t t = 0;

	for (int i = 0; i < n; i++)
		t += bytes[i];
	return t;
}

static const size_t pd_type_bytes[] = { [PD_COMM_F32] = 4, [PD_COMM_F64] = 8, [PD_COMM_I32] = 4, [PD_COMM_I64] = 8 };

static int pd_staged_allreduce(struct pd_comm *c, void *buf, size_t count, enum pd_comm_type t, enum pd_comm_op op)
{
	struct pd_staged_comm *s = STAGED(c);
	size_t bytes = count * pd_type_bytes[t];
	int k = pd_stage_get(s, bytes), rc;

	if (k < 0)
		return -1;
	rc = pd_stage_down(s, s->slot[k].p, buf, bytes) || s->inner->ops->allreduce(s->inner, s->slot[k].p, count, t, op) ||
	     pd_stage_up(s, buf, s->slot[k].p, bytes);
	pd_stage_put(s, k);
	return rc ? -1 : 0;
}

/* Two slots, for what goes out and what comes in. */
static int pd_stage_pair(struct pd_staged_comm *s, size_t out, size_t in, int *a, int *b)
{
	*a = pd_stage_get(s, out);
	*b = *a < 0 ? -1 : pd_stage_get(s, in);
	if (*b < 0) {
		pd_stage_put(s, *a);
		return -1;
	}
	return 0;
}

static int pd_staged_allgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
				const size_t *recv_bytes)
{
	struct pd_staged_comm *s = STAGED(c);
	size_t total = pd_stage_total(recv_bytes, c->size);
	int a, b, rc;

	if (pd_stage_pair(s, send_bytes, total, &a, &b))
		return -1;
	rc = pd_stage_down(s, s->slot[a].p, send, send_bytes) ||
	     s->inner->ops->allgatherv(s->inner, s->slot[a].p, send_bytes, s->slot[b].p, recv_bytes) ||
	     pd_stage_up(s, recv, s->slot[b].p, total);
	pd_stage_put(s, a);
	pd_stage_put(s, b);
	return rc ? -1 : 0;
}

/* A record for a transfer that finishes at wait; its index goes into REQ. */
static struct pd_stage_pending *pd_stage_pending_new(struct pd_staged_comm *s, struct pd_comm_req *req)
{
	struct pd_stage_pending *p;
	int i;

	if (req->active) {
		pd_errorf("%s: a request still in flight was used again", s->c.name);
		return NULL;
	}
	for (i = 0; i < s->n_pending && s->pending[i].used; i++)
		;
	if (i == s->n_pending) {
		p = realloc(s->pending, sizeof(*p) * (size_t)(s->n_pending + 1));
		if (!p) {
			pd_errorf("out of memory for %s's transfers", s->c.name);
			return NULL;
		}
		s->pending = p;
		s->n_pending++;
	}
	p = &s->pending[i];
	memset(p, 0, sizeof(*p));
	p->used = 1;
	p->send_slot = p->recv_slot = -1;
	memset(req, 0, sizeof(*req));
	memcpy(req->opaque, &i, sizeof(i));
	req->active = 1;
	return p;
}

static void pd_stage_pending_end(struct pd_staged_comm *s, struct pd_stage_pending *p, struct pd_comm_req *req)
{
	pd_stage_put(s, p->send_slot);
	pd_stage_put(s, p->recv_slot);
	p->used = 0;
	req->active = 0;
}

static int pd_staged_iallgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
				 const size_t *recv_bytes, struct pd_comm_req *req)
{
	struct pd_staged_comm *s = STAGED(c);
	struct pd_stage_pending *p = pd_stage_pending_new(s, req);
	size_t total = pd_stage_total(recv_bytes, c->size);

	if (!p)
		return -1;
	if (pd_stage_pair(s, send_bytes, total, &p->send_slot, &p->recv_slot) ||
	    pd_stage_down(s, s->slot[p->send_slot].p, send, send_bytes) ||
	    s->inner->ops->iallgatherv(s->inner, s->slot[p->send_slot].p, send_bytes, s->slot[p->recv_slot].p,
				       recv_bytes, &p->inner)) {
		pd_stage_pending_end(s, p, req);
		return -1;
	}
	p->dst = recv;
	p->bytes = total;
	return 0;
}

static int pd_staged_gatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			     const size_t *recv_bytes, int root)
{
	struct pd_staged_comm *s = STAGED(c);
	size_t total = c->rank == root ? pd_stage_total(recv_bytes, c->size) : 0;
	int a, b, rc;

	if (pd_stage_pair(s, send_bytes, total, &a, &b))
		return -1;
	rc = pd_stage_down(s, s->slot[a].p, send, send_bytes) ||
	     s->inner->ops->gatherv(s->inner, s->slot[a].p, send_bytes, s->slot[b].p, recv_bytes, root) ||
	     (c->rank == root && pd_stage_up(s, recv, s->slot[b].p, total));
	pd_stage_put(s, a);
	pd_stage_put(s, b);
	return rc ? -1 : 0;
}

static int pd_staged_alltoallv(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			       const size_t *recv_bytes)
{
	struct pd_staged_comm *s = STAGED(c);
	size_t out = pd_stage_total(send_bytes, c->size), in = pd_stage_total(recv_bytes, c->size);
	int a, b, rc;

	if (pd_stage_pair(s, out, in, &a, &b))
		return -1;
	rc = pd_stage_down(s, s->slot[a].p, send, out) ||
	     s->inner->ops->alltoallv(s->inner, s->slot[a].p, send_bytes, s->slot[b].p, recv_bytes) ||
	     pd_stage_up(s, recv, s->slot[b].p, in);
	pd_stage_put(s, a);
	pd_stage_put(s, b);
	return rc ? -1 : 0;
}

static int pd_staged_bcast(struct pd_comm *c, void *buf, size_t bytes, int root)
{
	struct pd_staged_comm *s = STAGED(c);
	int k = pd_stage_get(s, bytes), rc;

	if (k < 0)
		return -1;
	rc = (c->rank == root && pd_stage_down(s, s->slot[k].p, buf, bytes)) ||
	     s->inner->ops->bcast(s->inner, s->slot[k].p, bytes, root) ||
	     (c->rank != root && pd_stage_up(s, buf, s->slot[k].p, bytes));
	pd_stage_put(s, k);
	return rc ? -1 : 0;
}

static int pd_staged_isend(struct pd_comm *c, const void *buf, size_t bytes, int peer, int tag,
			   struct pd_comm_req *req)
{
	struct pd_staged_comm *s = STAGED(c);
	struct pd_stage_pending *p = pd_stage_pending_new(s, req);

	if (!p)
		return -1;
	p->send_slot = pd_stage_get(s, bytes);
	if (p->send_slot < 0 || pd_stage_down(s, s->slot[p->send_slot].p, buf, bytes) ||
	    s->inner->ops->isend(s->inner, s->slot[p->send_slot].p, bytes, peer, tag, &p->inner)) {
		pd_stage_pending_end(s, p, req);
		return -1;
	}
	return 0;
}

static int pd_staged_irecv(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	struct pd_staged_comm *s = STAGED(c);
	struct pd_stage_pending *p = pd_stage_pending_new(s, req);

	if (!p)
		return -1;
	p->recv_slot = pd_stage_get(s, bytes);
	if (p->recv_slot < 0 ||
	    s->inner->ops->irecv(s->inner, s->slot[p->recv_slot].p, bytes, peer, tag, &p->inner)) {
		pd_stage_pending_end(s, p, req);
		return -1;
	}
	p->dst = buf;
	p->bytes = bytes;
	return 0;
}

static int pd_staged_wait(struct pd_comm *c, struct pd_comm_req *req)
{
	struct pd_staged_comm *s = STAGED(c);
	struct pd_stage_pending *p;
	int i, rc;

	if (!req->active)
		return 0;
	memcpy(&i, req->opaque, sizeof(i));
	PD_ASSERT(i >= 0 && i < s->n_pending && s->pending[i].used);
	p = &s->pending[i];
	rc = s->inner->ops->wait(s->inner, &p->inner) ||
	     (p->dst && pd_stage_up(s, p->dst, s->slot[p->recv_slot].p, p->bytes));
	pd_stage_pending_end(s, p, req);
	return rc ? -1 : 0;
}

static int pd_staged_barrier(struct pd_comm *c)
{
	return STAGED(c)->inner->ops->barrier(STAGED(c)->inner);
}

static int pd_staged_split(struct pd_comm *c, int color, int key, struct pd_comm **out)
{
	(void)color;
	(void)key;
	*out = NULL;
	return pd_errorf("%s: a staged communicator is not split (split the host one)", c->name);
}

static void pd_staged_free(struct pd_comm *c)
{
	struct pd_staged_comm *s = STAGED(c);

	for (int i = 0; i < s->n_slot; i++)
		pd_stage_drop(s, i);
	free(s->slot);
	free(s->pending);
	free(s);
}

static void pd_staged_abort(struct pd_comm *c, int code)
{
	STAGED(c)->inner->ops->abort(STAGED(c)->inner, code);
}

static const struct pd_comm_ops pd_staged_ops = {
	.name = "staged",
	.allreduce = pd_staged_allreduce,
	.allgatherv = pd_staged_allgatherv,
	.iallgatherv = pd_staged_iallgatherv,
	.gatherv = pd_staged_gatherv,
	.alltoallv = pd_staged_alltoallv,
	.bcast = pd_staged_bcast,
	.isend = pd_staged_isend,
	.irecv = pd_staged_irecv,
	.wait = pd_staged_wait,
	.barrier = pd_staged_barrier,
	.split = pd_staged_split,
	.free = pd_staged_free,
	.abort = pd_staged_abort,
};

int pd_comm_staged_new(struct pd_comm *inner, struct pd_backend *be, struct pd_comm **out)
{
	struct pd_staged_comm *s = pd_calloc(1, sizeof(*s), "a staged communicator");

	*out = NULL;
	if (!s)
		return -1;
	s->c.ops = &pd_staged_ops;
	snprintf(s->c.name, sizeof(s->c.name), "%s", inner->name);
	s->c.rank = inner->rank;
	s->c.size = inner->size;
	s->c.timeout_s = inner->timeout_s;
	s->c.failed_rank = -1;
	s->c.impl = s;
	s->inner = inner;
	s->be = be;
	*out = &s->c;
	return 0;
}
