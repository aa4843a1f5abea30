/*
 * pd_comm_mpi.c - the communicator on MPI (Open MPI from Debian). The only
 * file that calls MPI.
 *
 * Byte counts are size_t; MPI's are int. Transfers whose sizes are all
 * multiples of 4 move as MPI_FLOAT-sized units (4 bytes), which keeps
 * every count below INT_MAX up to 8 GB per peer; a count still too large is
 * refused with a message rather than truncated.
 */
#include "pd_comm.h"
#include "pd_util.h"

#include <limits.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

int pd_comm_mpi_world_init(int *argc, char ***argv, struct pd_comm **world);
void pd_comm_mpi_finalize(void);
int pd_comm_mpi_local_size(struct pd_comm *world);

/* A request holds the MPI request and, for non-blocking collectives, the
 * count arrays MPI reads until the operation completes. */
struct pd_mpi_req {
	MPI_Request r;
	int *counts;                    /* counts then displacements, or NULL */
};

_Static_assert(sizeof(struct pd_mpi_req) <= sizeof(((struct pd_comm_req *)0)->opaque), "request handle too large");

struct pd_mpi {
	MPI_Comm comm;                  /* the MPI communicator */
	int is_world;                   /* MPI_COMM_WORLD: never freed */
	int *counts, *displs;           /* scratch for the v-collectives, size entries each */
	int *rcounts, *rdispls;
};

#define MPI_OF(c) ((struct pd_mpi *)(c)->impl)

static int pd_mpi_check(int rc, const char *what)
{
	char msg[MPI_MAX_ERROR_STRING];
	int len = 0;

	if (rc == MPI_SUCCESS)
		return 0;
	MPI_Error_string(rc, msg, &len);
	return pd_errorf("MPI %s failed: %s", what, msg);
}

/* The unit transfers are counted in: 4 bytes when every size allows it. */
static size_t pd_mpi_unit(const size_t *sizes, int n, size_t extra)
{
	size_t acc = extra;

	for (int i = 0; i < n; i++)
		acc |= sizes[i];
	return acc % 4 == 0 ? 4 : 1;
}

/* counts[i] = sizes[i] / unit, displs as prefix sums; refuses overflow. */
static int pd_mpi_counts(const size_t *sizes, int n, size_t unit, int *counts, int *displs, const char *what)
{
	size_t off = 0;

	for (int i = 0; i < n; i++) {
		size_t c = sizes[i] / unit;

		if (c > INT_MAX || off > INT_MAX)
			return pd_errorf("MPI %s: %zu bytes exceed what one transfer can carry", what, sizes[i]);
		counts[i] = (int)c;
		displs[i] = (int)off;
		off += c;
	}
	return 0;
}

static MPI_Datatype pd_mpi_unit_type(size_t unit)
{
	return unit == 4 ? MPI_FLOAT : MPI_BYTE;
}

static int pd_mpi_allreduce(struct pd_comm *c, void *buf, size_t count, enum pd_comm_type t, enum pd_comm_op op)
{
	static const MPI_Datatype types[] = { [PD_COMM_F32] = MPI_FLOAT, [PD_COMM_F64] = MPI_DOUBLE,
					      [PD_COMM_I32] = MPI_INT32_T, [PD_COMM_I64] = MPI_INT64_T };
	static const size_t sizes[] = { 4, 8, 4, 8 };
	MPI_Op mop = op == PD_COMM_SUM ? MPI_SUM : op == PD_COMM_MAX ? MPI_MAX : MPI_MIN;
	char *p = buf;

	/* A ring all-reduce sends 2 (n - 1) / n of the payload per rank. */
	c->bytes_sent += 2 * (uint64_t)(c->size - 1) * count * sizes[t] / (uint64_t)c->size;
	while (count > 0) {
		int n = count > INT_MAX ? INT_MAX : (int)count;

		if (pd_mpi_check(MPI_Allreduce(MPI_IN_PLACE, p, n, types[t], mop, MPI_OF(c)->comm), "all-reduce"))
			return -1;
		p += (size_t)n * sizes[t];
		count -= (size_t)n;
	}
	return 0;
}

static int pd_mpi_allgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			     const size_t *recv_bytes)
{
	struct pd_mpi *m = MPI_OF(c);
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);

	if (recv_bytes[c->rank] != send_bytes)
		return pd_errorf("all-gather: rank %d sends %zu bytes, expected %zu", c->rank, send_bytes,
				 recv_bytes[c->rank]);
	if (pd_mpi_counts(recv_bytes, c->size, unit, m->counts, m->displs, "all-gather"))
		return -1;
	c->bytes_sent += (uint64_t)send_bytes * (uint64_t)(c->size - 1);
	return pd_mpi_check(MPI_Allgatherv(send, (int)(send_bytes / unit), pd_mpi_unit_type(unit), recv, m->counts,
					   m->displs, pd_mpi_unit_type(unit), m->comm), "all-gather");
}

static int pd_mpi_gatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv, const size_t *recv_bytes,
			  int root)
{
	struct pd_mpi *m = MPI_OF(c);
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);

	if (recv_bytes[c->rank] != send_bytes)
		return pd_errorf("gather: rank %d sends %zu bytes, expected %zu", c->rank, send_bytes,
				 recv_bytes[c->rank]);
	if (pd_mpi_counts(recv_bytes, c->size, unit, m->counts, m->displs, "gather"))
		return -1;
	if (c->rank != root)
		c->bytes_sent += send_bytes;
	return pd_mpi_check(MPI_Gatherv(send, (int)(send_bytes / unit), pd_mpi_unit_type(unit), recv, m->counts,
					m->displs, pd_mpi_unit_type(unit), root, m->comm), "gather");
}

static int pd_mpi_alltoallv(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			    const size_t *recv_bytes)
{
	struct pd_mpi *m = MPI_OF(c);
	size_t unit = pd_mpi_unit(send_bytes, c->size, 0) == 4 && pd_mpi_unit(recv_bytes, c->size, 0) == 4 ? 4 : 1;

	if (pd_mpi_counts(send_bytes, c->size, unit, m->counts, m->displs, "all-to-all") ||
	    pd_mpi_counts(recv_bytes, c->size, unit, m->rcounts, m->rdispls, "all-to-all"))
		return -1;
	for (int j = 0; j < c->size; j++)
		if (j != c->rank)
			c->bytes_sent += send_bytes[j];
	return pd_mpi_check(MPI_Alltoallv(send, m->counts, m->displs, pd_mpi_unit_type(unit), recv, m->rcounts,
					  m->rdispls, pd_mpi_unit_type(unit), m->comm), "all-to-all");
}

static int pd_mpi_bcast(struct pd_comm *c, void *buf, size_t bytes, int root)
{
	char *p = buf;

	if (c->rank == root)
		c->bytes_sent += (uint64_t)bytes * (uint64_t)(c->size - 1);
	while (bytes > 0) {
		int n = bytes > INT_MAX ? INT_MAX : (int)bytes;

		if (pd_mpi_check(MPI_Bcast(p, n, MPI_BYTE, root, MPI_OF(c)->comm), "broadcast"))
			return -1;
		p += n;
		bytes -= (size_t)n;
	}
	return 0;
}

static int pd_mpi_p2p(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req,
		      int send)
{
	size_t unit = bytes % 4 == 0 ? 4 : 1;
	MPI_Request r;
	int rc;

	if (req->active)
		return pd_errorf("internal error: a %s request still in flight was reused", send ? "send" : "receive");
	if (bytes / unit > INT_MAX)
		return pd_errorf("MPI transfer of %zu bytes is too large", bytes);
	if (send) {
		c->bytes_sent += bytes;
		rc = MPI_Isend(buf, (int)(bytes / unit), pd_mpi_unit_type(unit), peer, tag, MPI_OF(c)->comm, &r);
	} else {
		rc = MPI_Irecv(buf, (int)(bytes / unit), pd_mpi_unit_type(unit), peer, tag, MPI_OF(c)->comm, &r);
	}
	if (pd_mpi_check(rc, send ? "send" : "receive"))
		return -1;
	{
		struct pd_mpi_req q = { r, NULL };

		memcpy(req->opaque, &q, sizeof(q));
	}
	req->active = 1;
	return 0;
}

static int pd_mpi_isend(struct pd_comm *c, const void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	return pd_mpi_p2p(c, (void *)buf, bytes, peer, tag, req, 1);
}

static int pd_mpi_irecv(struct pd_comm *c, void *buf, size_t bytes, int peer, int tag, struct pd_comm_req *req)
{
	return pd_mpi_p2p(c, buf, bytes, peer, tag, req, 0);
}

static int pd_mpi_wait(struct pd_comm *c, struct pd_comm_req *req)
{
	struct pd_mpi_req q;
	int rc;

	(void)c;
	if (!req->active)
		return 0;
	memcpy(&q, req->opaque, sizeof(q));
	req->active = 0;
	rc = pd_mpi_check(MPI_Wait(&q.r, MPI_STATUS_IGNORE), "wait");
	free(q.counts);
	return rc;
}

static int pd_mpi_iallgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			      const size_t *recv_bytes, struct pd_comm_req *req)
{
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);
	struct pd_mpi_req q = { MPI_REQUEST_NULL, NULL };

	if (req->active)
		return pd_errorf("internal error: an all-gather request still in flight was reused");
	q.counts = pd_calloc(2 * (size_t)c->size, sizeof(int), "counts");
	if (!q.counts)
		return -1;
	if (recv_bytes[c->rank] != send_bytes ||
	    pd_mpi_counts(recv_bytes, c->size, unit, q.counts, q.counts + c->size, "all-gather")) {
		free(q.counts);
		return recv_bytes[c->rank] != send_bytes ? pd_errorf("all-gather: size mismatch") : -1;
	}
	c->bytes_sent += (uint64_t)send_bytes * (uint64_t)(c->size - 1);
	if (pd_mpi_check(MPI_Iallgatherv(send, (int)(send_bytes / unit), pd_mpi_unit_type(unit), recv, q.counts,
					 q.counts + c->size, pd_mpi_unit_type(unit), MPI_OF(c)->comm, &q.r),
			 "all-gather")) {
		free(q.counts);
		return -1;
	}
	memcpy(req->opaque, &q, sizeof(q));
	req->active = 1;
	return 0;
}

static int pd_mpi_barrier(struct pd_comm *c)
{
	return pd_mpi_check(MPI_Barrier(MPI_OF(c)->comm), "barrier");
}

static int pd_mpi_wrap(MPI_Comm comm, int is_world, struct pd_comm **out);

static int pd_mpi_split(struct pd_comm *c, int color, int key, struct pd_comm **out)
{
	MPI_Comm nc;

	if (pd_mpi_check(MPI_Comm_split(MPI_OF(c)->comm, color, key, &nc), "communicator split"))
		return -1;
	if (pd_mpi_wrap(nc, 0, out)) {
		MPI_Comm_free(&nc);
		return -1;
	}
	return 0;
}

static void pd_mpi_free(struct pd_comm *c)
{
	struct pd_mpi *m;

	if (!c)
		return;
	m = MPI_OF(c);
	if (!m->is_world)
		MPI_Comm_free(&m->comm);
	free(m->counts);
	free(m->displs);
	free(m->rcounts);
	free(m->rdispls);
	free(m);
	free(c);
}

static void pd_mpi_abort(struct pd_comm *c, int code)
{
	(void)c;
	MPI_Abort(MPI_COMM_WORLD, code);
}

static const struct pd_comm_ops pd_mpi_ops = {
	.name = "mpi",
	.allreduce = pd_mpi_allreduce,
	.allgatherv = pd_mpi_allgatherv,
	.iallgatherv = pd_mpi_iallgatherv,
	.gatherv = pd_mpi_gatherv,
	.alltoallv = pd_mpi_alltoallv,
	.bcast = pd_mpi_bcast,
	.isend = pd_mpi_isend,
	.irecv = pd_mpi_irecv,
	.wait = pd_mpi_wait,
	.barrier = pd_mpi_barrier,
	.split = pd_mpi_split,
	.free = pd_mpi_free,
	.abort = pd_mpi_abort,
};

static int pd_mpi_wrap(MPI_Comm comm, int is_world, struct pd_comm **out)
{
	struct pd_comm *c = pd_calloc(1, sizeof(*c), "communicator");
	struct pd_mpi *m = pd_calloc(1, sizeof(*m), "communicator");

	if (!c || !m)
		goto fail;
	m->comm = comm;
	m->is_world = is_world;
	MPI_Comm_rank(comm, &c->rank);
	MPI_Comm_size(comm, &c->size);
	m->counts = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->displs = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->rcounts = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->rdispls = pd_calloc((size_t)c->size, sizeof(int), "counts");
	if (!m->counts || !m->displs || !m->rcounts || !m->rdispls)
		goto fail;
	c->ops = &pd_mpi_ops;
	c->impl = m;
	*out = c;
	return 0;
fail:
	if (m) {
		free(m->counts);
		free(m->displs);
		free(m->rcounts);
		free(m->rdispls);
	}
	free(m);
	free(c);
	return -1;
}

int pd_comm_mpi_world_init(int *argc, char ***argv, struct pd_comm **world)
{
	int provided, inited = 0;

	MPI_Initialized(&inited);
	/* Only the main thread talks to MPI; OpenMP threads compute. */
	if (!inited && pd_mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init"))
		return -1;
	return pd_mpi_wrap(MPI_COMM_WORLD, 1, world);
}

void pd_comm_mpi_finalize(void)
{
	int fin = 0;

	MPI_Finalized(&fin);
	if (!fin)
		MPI_Finalize();
}

int pd_comm_mpi_local_size(struct pd_comm *world)
{
	MPI_Comm node;
	int n = 1;

	if (MPI_Comm_split_type(MPI_OF(world)->comm, MPI_COMM_TYPE_SHARED, world->rank, MPI_INFO_NULL, &node) !=
	    MPI_SUCCESS)
		return 1;
	MPI_Comm_size(node, &n);
	MPI_Comm_free(&node);
	return n;
}
