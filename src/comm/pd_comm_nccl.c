/*
 * pd_comm_nccl.c - a communicator over NCCL for device buffers, one GPU a
 * process: made beside a host communicator (whose ranks it has, and over
 * which it is bootstrapped: rank 0's unique id broadcast), it takes the
 * backend's device buffers as they are, so nothing is staged through the
 * host. Its operations run on the backend's stream (the queue the backend
 * gives), ordered with the kernels before and after them: a "blocking"
 * operation returns once queued, and what follows on the stream sees its
 * result; the host sees it after the backend's next download.
 *
 * NCCL has no variable-size gathers: allgatherv, gatherv and alltoallv are
 * grouped sends and receives. Point-to-point transfers are grouped too
 * (a ring's send and receive must progress together, or both ends wait on
 * each other): isend and irecv are queued and launched together at the
 * first wait or other operation. Transfers are counted on the host
 * communicator, where pdit bench reads them.
 *
 * Not handled here: the host communicator's deadline (timeout_s) for a rank
 * that never arrives (NCCL waits on the device); several processes on one
 * GPU (NCCL refuses them: the engine chooses the staged communicator then).
 */
#include "pd_comm_impl.h"
#include "pd_util.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A send or receive waiting for its group's launch. */
struct pd_nccl_p2p {
	int send;                       /* 1 send, 0 receive */
	void *buf;
	size_t bytes;
	int peer;
};

struct pd_nccl_comm {
	struct pd_comm c;               /* the interface; must stay first */
	struct pd_comm *host;           /* the host communicator it stands beside (borrowed) */
	ncclComm_t nc;
	cudaStream_t stream;            /* the backend's */
	struct pd_nccl_p2p *queued;     /* point-to-point transfers not launched yet */
	int n_queued, cap_queued;
};

#define NC(comm) ((struct pd_nccl_comm *)(comm))

static int pd_nccl_ok(struct pd_comm *c, ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return 0;
	return pd_errorf("NCCL %s on '%s': %s", what, c->name, ncclGetErrorString(r));
}

/* The queued sends and receives as one group. */
static int pd_nccl_flush(struct pd_nccl_comm *n)
{
	ncclResult_t r = ncclSuccess;

	if (!n->n_queued)
		return 0;
	ncclGroupStart();
	for (int i = 0; i < n->n_queued && r == ncclSuccess; i++) {
		struct pd_nccl_p2p *q = &n->queued[i];

		r = q->send ? ncclSend(q->buf, q->bytes, ncclChar, q->peer, n->nc, n->stream)
			    : ncclRecv(q->buf, q->bytes, ncclChar, q->peer, n->nc, n->stream);
		if (q->send)
			n->host->bytes_sent += q->bytes;
	}
	if (ncclGroupEnd() != ncclSuccess && r == ncclSuccess)
		r = ncclInternalError;
	n->n_queued = 0;
	return pd_nccl_ok(&n->c, r, "send/receive");
}

static int pd_nccl_queue(struct pd_nccl_comm *n, int send, const void *buf, size_t bytes, int peer,
			 struct pd_comm_req *req)
{
	if (n->n_queued == n->cap_queued) {
		int cap = n->cap_queued ? 2 * n->cap_queued : 8;
		struct pd_nccl_p2p *q = realloc(n->queued, sizeof(*q) * (size_t)cap);

		if (!q)
			return pd_errorf("out of memory for NCCL's transfers");
		n->queued = q;
		n->cap_queued = cap;
	}
	n->queued[n->n_queued++] = (struct pd_nccl_p2p){ send, (void *)buf, bytes, peer };
	memset(req, 0, sizeof(*req));
	req->active = 1;
	return 0;
}

static ncclDataType_t pd_nccl_type(enum pd_comm_type t)
{
	return t == PD_COMM_F32 ? ncclFloat32 : t == PD_COMM_F64 ? ncclFloat64 : t == PD_COMM_I32 ? ncclInt32 : ncclInt64;
}

static int pd_nccl_allreduce(struct pd_comm *c, void *buf, size_t count, enum pd_comm_type t, enum pd_comm_op op)
{
	struct pd_nccl_comm *n = NC(c);
	ncclRedOp_t o = op == PD_COMM_SUM ? ncclSum : op == PD_COMM_MAX ? ncclMax : ncclMin;
	size_t esz = t == PD_COMM_F32 || t == PD_COMM_I32 ? 4 : 8;

	if (pd_nccl_flush(n))
		return -1;
	n->host->bytes_sent += 2 * (uint64_t)(c->size - 1) * count * esz / (uint64_t)c->size;
	return pd_nccl_ok(c, ncclAllReduce(buf, buf, count, pd_nccl_type(t), o, n->nc, n->stream), "all-reduce");
}

/* Each rank's part of SEND to every rank that receives (ROOT, or all with
 * ROOT -1), into RECV at the parts' offsets. */
static int pd_nccl_gather(struct pd_comm *c, const void *send, size_t send_bytes, void *recv, const size_t *recv_bytes,
			  int root)
{
	struct pd_nccl_comm *n = NC(c);
	ncclResult_t r = ncclSuccess;
	size_t off = 0, mine = 0;

	if (pd_nccl_flush(n))
		return -1;
	for (int j = 0; j < c->rank; j++)
		mine += recv_bytes[j];
	if (recv_bytes[c->rank] != send_bytes)
		return pd_errorf("%s: gather of %zu bytes where %zu are expected", c->name, send_bytes,
				 recv_bytes[c->rank]);
	ncclGroupStart();
	for (int j = 0; j < c->size && r == ncclSuccess; j++) {
		if (j != c->rank && (root < 0 || root == j) && send_bytes) {
			r = ncclSend(send, send_bytes, ncclChar, j, n->nc, n->stream);
			n->host->bytes_sent += send_bytes;
		}
		if (j != c->rank && (root < 0 || root == c->rank) && recv_bytes[j] && r == ncclSuccess)
			r = ncclRecv((char *)recv + off, recv_bytes[j], ncclChar, j, n->nc, n->stream);
		off += recv_bytes[j];
	}
	if (ncclGroupEnd() != ncclSuccess && r == ncclSuccess)
		r = ncclInternalError;
	if (r == ncclSuccess && (root < 0 || root == c->rank) && send_bytes && (char *)recv + mine != send &&
	    cudaMemcpyAsync((char *)recv + mine, send, send_bytes, cudaMemcpyDeviceToDevice, n->stream) != cudaSuccess)
		return pd_errorf("%s: a device copy failed", c->name);
	return pd_nccl_ok(c, r, "gather");
}

static int pd_nccl_allgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			      const size_t *recv_bytes)
{
	return pd_nccl_gather(c, send, send_bytes, recv, recv_bytes, -1);
}

/* On the stream like the rest: done, as far as the stream's next work can
 * tell, when it returns. */
static int pd_nccl_iallgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			       const size_t *recv_bytes, struct pd_comm_req *req)
{
	req->active = 0;
	return pd_nccl_gather(c, send, send_bytes, recv, recv_bytes, -1);
}

static int pd_nccl_gatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv, const size_t *recv_bytes,
			   int root)
{
	return pd_nccl_gather(c, send, send_bytes, recv, recv_bytes, root);
}

static int pd_nccl_alltoallv(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			     const size_t *recv_bytes)
{
	struct pd_nccl_comm *n = NC(c);
	ncclResult_t r = ncclSuccess;
	size_t so = 0, ro = 0, my_so = 0, my_ro = 0;

	if (pd_nccl_flush(n))
		return -1;
	ncclGroupStart();
	for (int j = 0; j < c->size && r == ncclSuccess; j++) {
		if (j == c->rank) {
			my_so = so;
			my_ro = ro;
		} else {
			if (send_bytes[j]) {
				r = ncclSend((const char *)send + so, send_bytes[j], ncclChar, j, n->nc, n->stream);
				n->host->bytes_sent += send_bytes[j];
			}
			if (recv_bytes[j] && r == ncclSuccess)
				r = ncclRecv((char *)recv + ro, recv_bytes[j], ncclChar, j, n->nc, n->stream);
		}
		so += send_bytes[j];
		ro += recv_bytes[j];
	}
	if (ncclGroupEnd() != ncclSuccess && r == ncclSuccess)
		r = ncclInternalError;
	if (r == ncclSuccess && send_bytes[c->rank] &&
	    cudaMemcpyAsync((char *)recv + my_ro, (const char *)send + my_so, send_bytes[c->rank],
			    cudaMemcpyDeviceToDevice, n->stream) != cudaSuccess)
		return pd_errorf("%s: a device copy failed", c->name);
	return pd_nccl_ok(c, r, "all-to-all");
}

static int pd_nccl_bcast(struct pd_comm *c, void *buf, size_t bytes, int root)
{
	struct pd_nccl_comm *n = NC(c);

	if (pd_nccl_flush(n))
		return -1;
	if (c->rank == root)
		n->host->bytes_sent += bytes * (uint64_t)(c->size - 1);
	return pd_nccl_ok(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, n->nc, n->stream), "broadcast");
}

static int pd_nccl_isend(struct pd_comm *c, const void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	(void)tag;
	return pd_nccl_queue(NC(c), 1, buf, bytes, peer, req);
}

static int pd_nccl_irecv(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	(void)tag;
	return pd_nccl_queue(NC(c), 0, buf, bytes, peer, req);
}

static int pd_nccl_wait(struct pd_comm *c, struct pd_comm_req *req)
{
	if (!req->active)
		return 0;
	req->active = 0;
	return pd_nccl_flush(NC(c));
}

static int pd_nccl_barrier(struct pd_comm *c)
{
	struct pd_nccl_comm *n = NC(c);

	if (pd_nccl_flush(n) || cudaStreamSynchronize(n->stream) != cudaSuccess)
		return pd_errorf("%s: the device failed before a barrier", c->name);
	return n->host->ops->barrier(n->host);
}

static int pd_nccl_split(struct pd_comm *c, int color, int key, struct pd_comm **out)
{
	(void)color;
	(void)key;
	*out = NULL;
	return pd_errorf("%s: an NCCL communicator is not split (split the host one)", c->name);
}

static void pd_nccl_free(struct pd_comm *c)
{
	struct pd_nccl_comm *n = NC(c);

	pd_nccl_flush(n);
	cudaStreamSynchronize(n->stream);
	ncclCommDestroy(n->nc);
	free(n->queued);
	free(n);
}

static void pd_nccl_abort(struct pd_comm *c, int code)
{
	ncclCommAbort(NC(c)->nc);
	NC(c)->host->ops->abort(NC(c)->host, code);
}

static const struct pd_comm_ops pd_nccl_ops = {
	.name = "nccl",
	.allreduce = pd_nccl_allreduce,
	.allgatherv = pd_nccl_allgatherv,
	.iallgatherv = pd_nccl_iallgatherv,
	.gatherv = pd_nccl_gatherv,
	.alltoallv = pd_nccl_alltoallv,
	.bcast = pd_nccl_bcast,
	.isend = pd_nccl_isend,
	.irecv = pd_nccl_irecv,
	.wait = pd_nccl_wait,
	.barrier = pd_nccl_barrier,
	.split = pd_nccl_split,
	.free = pd_nccl_free,
	.abort = pd_nccl_abort,
};

int pd_comm_nccl_available(void)
{
	return 1;
}

int pd_comm_nccl_new(struct pd_comm *host, void *stream, struct pd_comm **out)
{
	struct pd_nccl_comm *n;
	struct {
		int ok;                 /* rank 0 made the id */
		ncclUniqueId id;
	} boot;
	ncclResult_t r;

	*out = NULL;
	memset(&boot, 0, sizeof(boot));
	if (host->rank == 0)
		boot.ok = ncclGetUniqueId(&boot.id) == ncclSuccess;
	/* every rank takes part in the broadcast, also after a failed id */
	if (host->ops->bcast(host, &boot, sizeof(boot), 0))
		return -1;
	if (!boot.ok)
		return pd_errorf("NCCL on '%s': rank 0 could not make the communicator's id", host->name);
	n = pd_calloc(1, sizeof(*n), "an NCCL communicator");
	if (!n)
		return -1;
	n->c.ops = &pd_nccl_ops;
	snprintf(n->c.name, sizeof(n->c.name), "%s", host->name);
	n->c.rank = host->rank;
	n->c.size = host->size;
	n->c.timeout_s = host->timeout_s;
	n->c.failed_rank = -1;
	n->c.impl = n;
	n->host = host;
	n->stream = (cudaStream_t)stream;
	r = ncclCommInitRank(&n->nc, host->size, boot.id, host->rank);
	if (r != ncclSuccess) {
		free(n);
		return pd_errorf("NCCL on '%s' (%d ranks): %s", host->name, host->size, ncclGetErrorString(r));
	}
	*out = &n->c;
	return 0;
}
