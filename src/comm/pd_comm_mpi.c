/*
 * pd_comm_mpi.c - the communicator on MPI (Open MPI from Debian). The only
 * file that calls MPI.
 *
 * Byte counts are size_t; MPI's are int. Transfers whose sizes are all
 * multiples of 4 move as MPI_FLOAT-sized units (4 bytes), which keeps
 * every count below INT_MAX up to 8 GB per peer; a count still too large is
 * refused with a message rather than truncated.
 *
 * Every collective is started non-blocking and waited for by
 * pd_mpi_wait_req, which polls with a deadline (the communicator's timeout_s). While
 * it waits it answers other ranks' questions on a private duplicate of the
 * world ("what are you waiting for?"); past the deadline it asks the
 * communicator's other ranks, reports who is missing (no answer: busy
 * outside communication, stuck, or gone) and what the rest wait for, and
 * aborts the job.
 */
#include "pd_comm_impl.h"
#include "pd_util.h"

#include <limits.h>
#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A request holds the MPI request and, for non-blocking collectives, the
 * count arrays MPI reads until the operation completes. */
struct pd_mpi_req {
	MPI_Request r;
	int *counts;                    /* counts then displacements, or NULL */
	unsigned long long op;          /* a collective's number on its communicator, or 0 */
	int peer;                       /* a transfer's peer (rank in the communicator) */
	int send;                       /* a transfer's direction */
};

_Static_assert(sizeof(struct pd_mpi_req) <= sizeof(((struct pd_comm_req *)0)->opaque), "request handle too large");

struct pd_mpi {
	MPI_Comm comm;                  /* the MPI communicator */
	int is_world;                   /* MPI_COMM_WORLD: never freed */
	int *world_rank;                /* world rank of each member, for reports */
	unsigned long long ops;         /* collectives started on it, numbering them in reports */
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

/* ----------------------------------------------------------------------- */
/* Waiting with a deadline                                                 */
/* ----------------------------------------------------------------------- */

#define PD_TAG_QUERY 31001
#define PD_TAG_REPLY 31002
#define PD_STATE_LEN 160
#define PD_STATE_WORKING "working (between transfers)"

static MPI_Comm pd_watch = MPI_COMM_NULL;       /* duplicate of the world for the questions */
/* Processes on this machine, counted once at start where every rank takes
 * part: a later caller may be alone (one rank on an error path must not
 * start a collective). */
static int pd_local_size = 1;
/* Its share of the machine's CPUs, counted there too. */
static struct pd_cpu_share pd_share;
static char pd_state[PD_STATE_LEN];            /* what this rank waits for, as it answers */

/* Answers every question that has arrived: this rank's state. */
static void pd_mpi_answer(void)
{
	for (;;) {
		MPI_Status st;
		int flag = 0, dummy;

		if (MPI_Iprobe(MPI_ANY_SOURCE, PD_TAG_QUERY, pd_watch, &flag, &st) != MPI_SUCCESS || !flag)
			return;
		MPI_Recv(&dummy, 1, MPI_INT, st.MPI_SOURCE, PD_TAG_QUERY, pd_watch, MPI_STATUS_IGNORE);
		/* small enough to go out eagerly: the send does not wait for the asker */
		MPI_Send(pd_state, PD_STATE_LEN, MPI_CHAR, st.MPI_SOURCE, PD_TAG_REPLY, pd_watch);
	}
}

/* True when state THEIRS is a later collective on the same communicator
 * as MINE: that rank has finished this one (a broadcast's root, a
 * gather's senders) and is not what holds it up. */
static int pd_mpi_ahead(const char *theirs, const char *mine)
{
	const char *a = strstr(theirs, " #"), *b = strstr(mine, " #");
	unsigned long long na, nb;
	char ca[64], cb[64];

	if (!a || !b || sscanf(a, " #%llu on '%63[^']'", &na, ca) != 2 || sscanf(b, " #%llu on '%63[^']'", &nb, cb) != 2)
		return 0;
	return strcmp(ca, cb) == 0 && na > nb;
}

/* Past the deadline: asks every rank what it does, prints the members of C
 * that are not in this operation and the ranks that do not answer at all
 * (busy outside communication, stuck or gone: usually the cause), and
 * ends the job. */
static void pd_mpi_report_hang(struct pd_comm *c, double waited)
{
	struct pd_mpi *m = MPI_OF(c);
	int me, n = 0, dummy = 0;
	char (*reply)[PD_STATE_LEN] = NULL;
	MPI_Request *sends = NULL;
	double t0 = MPI_Wtime();

	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	reply = calloc((size_t)n, PD_STATE_LEN);
	sends = calloc((size_t)n, sizeof(MPI_Request));
	fprintf(stderr, "pdit: rank %d: %s has waited %.0f s (--comm-timeout %g); asking every rank\n", me, pd_state,
		waited, c->timeout_s);
	if (reply && sends) {
		char missing[512] = "", silent[512] = "";
		size_t lm = 0, ls = 0;

		for (int j = 0; j < n; j++) {
			sends[j] = MPI_REQUEST_NULL;
			if (j != me)
				MPI_Isend(&dummy, 1, MPI_INT, j, PD_TAG_QUERY, pd_watch, &sends[j]);
		}
		/* three seconds for the answers, answering the others meanwhile */
		while (MPI_Wtime() - t0 < 3.0) {
			MPI_Status st;
			int flag = 0, got = 1;

			pd_mpi_answer();
			if (MPI_Iprobe(MPI_ANY_SOURCE, PD_TAG_REPLY, pd_watch, &flag, &st) == MPI_SUCCESS && flag) {
				MPI_Recv(reply[st.MPI_SOURCE], PD_STATE_LEN, MPI_CHAR, st.MPI_SOURCE, PD_TAG_REPLY, pd_watch,
					 MPI_STATUS_IGNORE);
				reply[st.MPI_SOURCE][PD_STATE_LEN - 1] = 0;
				continue;
			}
			for (int j = 0; j < n; j++)
				got += j != me && reply[j][0];
			if (got == n)
				break;
			usleep(1000);
		}
		/* a transfer waits for its peer alone, in the matching transfer */
		int peer = -1;
		char pair[64] = "";

		if (strncmp(pd_state, "send to rank ", 13) == 0 || strncmp(pd_state, "receive from rank ", 18) == 0) {
			peer = atoi(strstr(pd_state, "rank ") + 5);
			snprintf(pair, sizeof(pair), "rank %d on '%s'", me, c->name);
		}
		for (int j = 0; j < n; j++) {
			int member = 0;

			for (int k = 0; k < c->size; k++)
				member |= m->world_rank[k] == j && (peer < 0 || j == peer);
			if (j == me || (reply[j][0] && strcmp(reply[j], pd_state) == 0) ||
			    (member && peer >= 0 && strstr(reply[j], pair)))
				continue;
			if (!reply[j][0]) {
				if (member)
					fprintf(stderr, "pdit: rank %d: rank %d does not answer: busy outside communication, "
						"stuck, or gone\n", me, j);
				if (ls < sizeof(silent) - 16)
					ls += (size_t)snprintf(silent + ls, sizeof(silent) - ls, "%s%d%s", ls ? " " : "", j,
							       member ? "" : "*");
			} else if (member && pd_mpi_ahead(reply[j], pd_state)) {
				fprintf(stderr, "pdit: rank %d: rank %d is done with it and ahead: %s\n", me, j, reply[j]);
				continue;
			} else if (member) {
				fprintf(stderr, "pdit: rank %d: rank %d is elsewhere: %s\n", me, j, reply[j]);
			}
			if (member && lm < sizeof(missing) - 16)
				lm += (size_t)snprintf(missing + lm, sizeof(missing) - lm, "%s%d", lm ? " " : "", j);
		}
		char note[64] = "";

		if (strchr(silent, '*'))
			snprintf(note, sizeof(note), " (*: not in '%s')", c->name);
		fprintf(stderr, "pdit: rank %d: %s: ranks missing: %s; not answering: %s%s; stopping every process\n", me,
			pd_state, lm ? missing : "none (the transfer itself is stuck)", ls ? silent : "none", note);
	}
	fflush(stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	free(reply);
	free(sends);
}

/* Waits for R, collective number OP of WHAT on C (OP 0: a transfer with
 * PEER), answering questions and watching the deadline; spins briefly, then sleeps between tests so that waiting
 * ranks leave the cores to those still computing. */
static int pd_mpi_wait_req(struct pd_comm *c, MPI_Request *r, const char *what, unsigned long long op, int peer)
{
	struct pd_mpi *m = MPI_OF(c);
	double t0 = 0;
	long spins = 0;
	int done = 0;

	if (pd_mpi_check(MPI_Test(r, &done, MPI_STATUS_IGNORE), what))
		return -1;
	if (done)
		return 0;
	t0 = MPI_Wtime();
	/* collectives are numbered per communicator, the same on every member
	 * (the reports compare these strings and parse "#N on 'NAME'") */
	if (op == 0)
		snprintf(pd_state, sizeof(pd_state), "%s rank %d on '%s'", what, m->world_rank[peer], c->name);
	else
		snprintf(pd_state, sizeof(pd_state), "%s #%llu on '%s' (%d rank%s)", what, op, c->name, c->size,
			 c->size == 1 ? "" : "s");
	while (!done) {
		if (pd_mpi_check(MPI_Test(r, &done, MPI_STATUS_IGNORE), what))
			return -1;
		if (done)
			break;
		if (pd_watch != MPI_COMM_NULL)
			pd_mpi_answer();
		if (++spins > 2000) {
			double waited = MPI_Wtime() - t0;

			if (c->timeout_s > 0 && waited > c->timeout_s)
				pd_mpi_report_hang(c, waited);
			/* a long wait polls less often: with more processes than
			 * cores every wake-up is taken from one still computing */
			usleep(waited > 1.0 ? 1000 : waited > 0.01 ? 500 : 20);
		}
	}
	snprintf(pd_state, sizeof(pd_state), "%s", PD_STATE_WORKING);
	c->wait_s += MPI_Wtime() - t0;
	return 0;
}

/* Counts a collective started on C, numbering it for the reports. */
static void pd_mpi_begin(struct pd_comm *c)
{
	MPI_OF(c)->ops++;
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

		MPI_Request r;

		pd_mpi_begin(c);
		if (pd_mpi_check(MPI_Iallreduce(MPI_IN_PLACE, p, n, types[t], mop, MPI_OF(c)->comm, &r), "all-reduce") ||
		    pd_mpi_wait_req(c, &r, "all-reduce", MPI_OF(c)->ops, 0))
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
	MPI_Request r;
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);

	if (recv_bytes[c->rank] != send_bytes)
		return pd_errorf("all-gather: rank %d sends %zu bytes, expected %zu", c->rank, send_bytes,
				 recv_bytes[c->rank]);
	if (pd_mpi_counts(recv_bytes, c->size, unit, m->counts, m->displs, "all-gather"))
		return -1;
	c->bytes_sent += (uint64_t)send_bytes * (uint64_t)(c->size - 1);
	pd_mpi_begin(c);
	if (pd_mpi_check(MPI_Iallgatherv(send, (int)(send_bytes / unit), pd_mpi_unit_type(unit), recv, m->counts,
					 m->displs, pd_mpi_unit_type(unit), m->comm, &r), "all-gather"))
		return -1;
	return pd_mpi_wait_req(c, &r, "all-gather", MPI_OF(c)->ops, 0);
}

static int pd_mpi_gatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv, const size_t *recv_bytes,
			  int root)
{
	struct pd_mpi *m = MPI_OF(c);
	MPI_Request r;
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);

	if (recv_bytes[c->rank] != send_bytes)
		return pd_errorf("gather: rank %d sends %zu bytes, expected %zu", c->rank, send_bytes,
				 recv_bytes[c->rank]);
	if (pd_mpi_counts(recv_bytes, c->size, unit, m->counts, m->displs, "gather"))
		return -1;
	if (c->rank != root)
		c->bytes_sent += send_bytes;
	pd_mpi_begin(c);
	if (pd_mpi_check(MPI_Igatherv(send, (int)(send_bytes / unit), pd_mpi_unit_type(unit), recv, m->counts,
				      m->displs, pd_mpi_unit_type(unit), root, m->comm, &r), "gather"))
		return -1;
	return pd_mpi_wait_req(c, &r, "gather", MPI_OF(c)->ops, 0);
}

static int pd_mpi_alltoallv(struct pd_comm *c, const void *send, const size_t *send_bytes, void *recv,
			    const size_t *recv_bytes)
{
	struct pd_mpi *m = MPI_OF(c);
	size_t unit = pd_mpi_unit(send_bytes, c->size, 0) == 4 && pd_mpi_unit(recv_bytes, c->size, 0) == 4 ? 4 : 1;
	MPI_Request r;

	if (pd_mpi_counts(send_bytes, c->size, unit, m->counts, m->displs, "all-to-all") ||
	    pd_mpi_counts(recv_bytes, c->size, unit, m->rcounts, m->rdispls, "all-to-all"))
		return -1;
	for (int j = 0; j < c->size; j++)
		if (j != c->rank)
			c->bytes_sent += send_bytes[j];
	pd_mpi_begin(c);
	if (pd_mpi_check(MPI_Ialltoallv(send, m->counts, m->displs, pd_mpi_unit_type(unit), recv, m->rcounts,
					m->rdispls, pd_mpi_unit_type(unit), m->comm, &r), "all-to-all"))
		return -1;
	return pd_mpi_wait_req(c, &r, "all-to-all", MPI_OF(c)->ops, 0);
}

static int pd_mpi_bcast(struct pd_comm *c, void *buf, size_t bytes, int root)
{
	char *p = buf;

	if (c->rank == root)
		c->bytes_sent += (uint64_t)bytes * (uint64_t)(c->size - 1);
	while (bytes > 0) {
		int n = bytes > INT_MAX ? INT_MAX : (int)bytes;

		MPI_Request r;

		pd_mpi_begin(c);
		if (pd_mpi_check(MPI_Ibcast(p, n, MPI_BYTE, root, MPI_OF(c)->comm, &r), "broadcast") ||
		    pd_mpi_wait_req(c, &r, "broadcast", MPI_OF(c)->ops, 0))
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
		struct pd_mpi_req q = { r, NULL, 0, peer, send };

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

	if (!req->active)
		return 0;
	memcpy(&q, req->opaque, sizeof(q));
	req->active = 0;
	rc = pd_mpi_wait_req(c, &q.r, q.counts ? "all-gather" : q.send ? "send to" : "receive from", q.op, q.peer);
	free(q.counts);
	return rc;
}

static int pd_mpi_iallgatherv(struct pd_comm *c, const void *send, size_t send_bytes, void *recv,
			      const size_t *recv_bytes, struct pd_comm_req *req)
{
	size_t unit = pd_mpi_unit(recv_bytes, c->size, send_bytes);
	struct pd_mpi_req q = { MPI_REQUEST_NULL, NULL, 0, 0, 0 };

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
	pd_mpi_begin(c);
	q.op = MPI_OF(c)->ops;
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
	MPI_Request r;

	pd_mpi_begin(c);
	if (pd_mpi_check(MPI_Ibarrier(MPI_OF(c)->comm, &r), "barrier"))
		return -1;
	return pd_mpi_wait_req(c, &r, "barrier", MPI_OF(c)->ops, 0);
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
	(*out)->timeout_s = c->timeout_s;
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
	free(m->world_rank);
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
	c->failed_rank = -1;
	m->counts = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->displs = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->rcounts = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->rdispls = pd_calloc((size_t)c->size, sizeof(int), "counts");
	m->world_rank = pd_calloc((size_t)c->size, sizeof(int), "counts");
	if (!m->counts || !m->displs || !m->rcounts || !m->rdispls || !m->world_rank)
		goto fail;
	{
		MPI_Group g, wg;

		/* its members' world ranks: m->counts serves as 0..size-1 for the moment */
		for (int j = 0; j < c->size; j++)
			m->counts[j] = j;
		MPI_Comm_group(comm, &g);
		MPI_Comm_group(MPI_COMM_WORLD, &wg);
		MPI_Group_translate_ranks(g, c->size, m->counts, wg, m->world_rank);
		MPI_Group_free(&g);
		MPI_Group_free(&wg);
	}
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
		free(m->world_rank);
	}
	free(m);
	free(c);
	return -1;
}

/* Every process's affinity mask, gathered over the world (not over NODE,
 * the LOCAL processes of this machine, just split: a transfer on a
 * communicator a peer has not finished making reaches Open MPI 4.1's
 * matching before the peer knows it, which crashed over TCP), then those
 * of NODE's members: which meet this one's, what they cover together.
 * Where a mask cannot be read, every process is taken to share the
 * machine (the cores divided among them, as before masks were read). */
static void pd_mpi_cpu_share(MPI_Comm node, int local)
{
	cpu_set_t mine, every, both;
	cpu_set_t *all = NULL;
	int size = 1, ok, all_ok = 0, *members = malloc(2 * sizeof(int) * (size_t)local);
	MPI_Group wg = MPI_GROUP_NULL, ng = MPI_GROUP_NULL;

	MPI_Comm_size(MPI_COMM_WORLD, &size);
	all = malloc(sizeof(cpu_set_t) * (size_t)size);
	ok = all && members && sched_getaffinity(0, sizeof(mine), &mine) == 0 &&
	     MPI_Comm_group(MPI_COMM_WORLD, &wg) == MPI_SUCCESS && MPI_Comm_group(node, &ng) == MPI_SUCCESS;
	if (ok) {
		/* NODE's ranks 0..local-1 as world ranks: no transfer */
		for (int i = 0; i < local; i++)
			members[i] = i;
		ok = MPI_Group_translate_ranks(ng, local, members, wg, members + local) == MPI_SUCCESS;
	}
	/* every process takes part in both, whatever it has */
	if (MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD) != MPI_SUCCESS ||
	    (all_ok && MPI_Allgather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE,
				     MPI_COMM_WORLD) != MPI_SUCCESS))
		all_ok = 0;
	if (all_ok) {
		CPU_ZERO(&every);
		pd_share.sharing = 0;
		for (int i = 0; i < local; i++) {
			int r = members[local + i];

			if (r < 0 || r >= size)
				continue;
			CPU_AND(&both, &mine, &all[r]);
			pd_share.sharing += CPU_COUNT(&both) > 0;
			CPU_OR(&every, &every, &all[r]);
		}
		pd_share.cpus = CPU_COUNT(&mine);
		pd_share.used = CPU_COUNT(&every);
	}
	if (!all_ok || pd_share.sharing < 1) {
		pd_share.sharing = local;
		pd_share.cpus = pd_share.used = pd_share.online;
	}
	if (wg != MPI_GROUP_NULL)
		MPI_Group_free(&wg);
	if (ng != MPI_GROUP_NULL)
		MPI_Group_free(&ng);
	free(members);
	free(all);
}

int pd_comm_mpi_world_init(int *argc, char ***argv, struct pd_comm **world)
{
	int provided, inited = 0;

	MPI_Initialized(&inited);
	/* Only the main thread talks to MPI; OpenMP threads compute. */
	if (!inited && pd_mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "init"))
		return -1;
	if (pd_watch == MPI_COMM_NULL && pd_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &pd_watch), "communicator duplicate"))
		return -1;
	snprintf(pd_state, sizeof(pd_state), "%s", PD_STATE_WORKING);
	{
		MPI_Comm node;

		pd_comm_cpu_alone(&pd_share);
		if (MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
			MPI_Comm_size(node, &pd_local_size);
			pd_mpi_cpu_share(node, pd_local_size);
			MPI_Comm_free(&node);
		}
	}
	return pd_mpi_wrap(MPI_COMM_WORLD, 1, world);
}

void pd_comm_mpi_finalize(void)
{
	int fin = 0;

	MPI_Finalized(&fin);
	if (!fin) {
		if (pd_watch != MPI_COMM_NULL)
			MPI_Comm_free(&pd_watch);
		MPI_Finalize();
	}
}

const char *pd_comm_mpi_activity(void)
{
	/* the buffer itself, not a copy: a signal handler reads it. Between
	 * transfers it holds the answer to the others' questions, which is
	 * not a wait */
	return strcmp(pd_state, PD_STATE_WORKING) == 0 ? "" : pd_state;
}

int pd_comm_mpi_local_size(struct pd_comm *world)
{
	(void)world;
	return pd_local_size;
}

void pd_comm_mpi_cpu_share(struct pd_cpu_share *s)
{
	/* counted at the world's start; a process that never started one alone */
	if (pd_share.sharing > 0)
		*s = pd_share;
	else
		pd_comm_cpu_alone(s);
}
