/*
 * raw.c: the hand-written libibverbs reference of the zero-cost check (see README.md here).
 *
 * Opens the device, allocates a PD, two MRs, one CQ per QP, creates two RC QPs connected to
 * each other on the same device (loopback), then runs a fixed sequence in `run_loop`:
 * N = 1000 RDMA WRITEs of 64 bytes, every 16th one (and the last) signaled, polling the CQ
 * after each signaled one until its completion arrives.
 *
 * `run_loop` contains only the post/poll loop; callgrind counts it with
 * `--toggle-collect=run_loop --toggle-collect=settle`: `settle` (a 20 ms sleep before polling,
 * so that the completion is there at the first poll whatever the emulator's speed) toggles
 * collection off while it runs, so spinning on an empty CQ does not make the count depend on
 * timing. The number of empty polls that happened anyway is printed (expected: 0).
 * The same sequence runs once before, uncounted (`warm_up`), so that lazy symbol binding and
 * first-touch effects are outside the measured call.
 *
 * With --send, the sequence is `run_loop_send` (warm-up `warm_up_send`): N = 1000 SENDs of 64
 * bytes from one QP to the other, a receive posted on the other QP before each, every 16th send
 * (and the last) signaled; after each signaled one, a poll for its completion, then one poll
 * per receive posted since the last. One `ibv_recv_wr` and one `ibv_send_wr` are re-posted.
 *
 * With --tokens, the sequence is `run_loop_tokens` (warm-up `warm_up_tokens`): `run_loop`'s 1000
 * RDMA WRITEs written the way the typed scope path must do them, in C: a request and a token per
 * post. Per request: a fresh `ibv_send_wr` (zeroed) built from a view of local memory and a
 * remote slice; the checks (the length fits the remote slice, the memory is of the QP's PD and
 * pinned, the entry count within max_send_sge); the send queue's book under a ticket lock (the
 * QP not broken, room in the queue, a forced signal every half queue, the sequence number as
 * wr_id, the owner recorded); a token (queue, sequence number, view). A signaled token's wait
 * polls its completion and publishes the book's `done` under the lock; an unsignaled token it
 * covers is proved complete by one load and handed a stored implied completion and its view.
 * It measures what the scope path's book-keeping costs when written by hand, not a library:
 * no scope drain, no wakers, no parked buffers.
 *
 * Usage: raw [--send | --pingpong | --tokens] [DEVICE [GID_INDEX]] (defaults: $TYPED_VERBS_DEVICE or rxe0,
 * $TYPED_VERBS_GID_INDEX or 1). Build: cc -O2 -g -o raw raw.c -libverbs
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "../common/rc_connect.h"
#include "../common/util.h"

#define N 1000
#define SIGNAL_EVERY 16
#define PP_DEPTH 16
#define MSG 64
#define PORT 1
#define TIMEOUT_NS (30LL * 1000 * 1000 * 1000)

static long empty_polls;

/* Keep run_loop and warm_up two distinct symbols (GCC's identical code folding could merge them). */
#if defined(__GNUC__) && !defined(__clang__)
#define MEASURED __attribute__((noinline, noipa))
#else
#define MEASURED __attribute__((noinline))
#endif

/* Outside the count (second toggle): gives the device time to complete the request. */
MEASURED void settle(void)
{
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 20 * 1000 * 1000 };
	nanosleep(&ts, NULL);
}

/* One busy-poll of `cq` for one completion, bounded (the clock is read every 1024 empty
 * polls); 0 if it is a success with `wr_id`. */
static inline __attribute__((always_inline)) int poll_one(struct ibv_cq *cq, uint64_t wr_id)
{
	struct ibv_wc wc;
	long long deadline = 0;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if ((++empty_polls & 1023) == 0) {
			if (!deadline)
				deadline = now_ns() + TIMEOUT_NS;
			else if (now_ns() > deadline)
				return -2;
		}
	}
	return n < 0 || wc.status != IBV_WC_SUCCESS || wc.wr_id != wr_id ? -3 : 0;
}

static inline __attribute__((always_inline)) int loop_body(struct ibv_qp *qp, struct ibv_cq *cq,
							     struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = MSG, .lkey = src->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	int i;

	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.wr.rdma.remote_addr = (uintptr_t)dst->addr;
	wr.wr.rdma.rkey = dst->rkey;

	for (i = 0; i < N; i++) {
		int signaled = (i + 1) % SIGNAL_EVERY == 0 || i == N - 1;

		wr.wr_id = i;
		wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
		if (ibv_post_send(qp, &wr, &bad))
			return -1;
		if (!signaled)
			continue;
		settle();
		int rc = poll_one(cq, i);
		if (rc)
			return rc;
	}
	return 0;
}

static inline __attribute__((always_inline)) int send_body(struct ibv_qp *a, struct ibv_cq *cq_a, struct ibv_qp *b,
							     struct ibv_cq *cq_b, struct ibv_mr *src, struct ibv_mr *dst)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = MSG, .lkey = src->lkey };
	struct ibv_sge rsge = { .addr = (uintptr_t)dst->addr, .length = MSG, .lkey = dst->lkey };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_recv_wr rwr, *rbad = NULL;
	int i, first = 0;

	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	memset(&rwr, 0, sizeof rwr);
	rwr.sg_list = &rsge;
	rwr.num_sge = 1;

	for (i = 0; i < N; i++) {
		int signaled = (i + 1) % SIGNAL_EVERY == 0 || i == N - 1;

		rwr.wr_id = i;
		if (ibv_post_recv(b, &rwr, &rbad))
			return -1;
		wr.wr_id = i;
		wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
		if (ibv_post_send(a, &wr, &bad))
			return -1;
		if (!signaled)
			continue;
		settle();
		int rc = poll_one(cq_a, i);
		for (; !rc && first <= i; first++)
			rc = poll_one(cq_b, first);
		if (rc)
			return rc;
	}
	return 0;
}

/* perftest's run_iter_lat_send (CQ moderation 1, every send signaled) with both sides in one
 * thread: message m goes from side m % 2 to the other. Before sending message m (m > 0), its
 * sender polls its receive CQ for message m - 1 and re-posts a receive while more messages
 * are to come; after sending, it polls its send CQ for the send's completion. PP_DEPTH
 * receives are posted on each side first, and exactly as many in all as messages arrive. */
static inline __attribute__((always_inline)) int pingpong_body(struct ibv_qp **qp, struct ibv_cq **cq,
								 struct ibv_cq **rcq, struct ibv_mr *src,
								 struct ibv_mr *dst)
{
	struct ibv_sge sge = { .addr = (uintptr_t)src->addr, .length = MSG, .lkey = src->lkey };
	struct ibv_sge rsge[2] = { { .addr = (uintptr_t)dst->addr, .length = MSG, .lkey = dst->lkey },
				   { .addr = (uintptr_t)dst->addr + MSG, .length = MSG, .lkey = dst->lkey } };
	struct ibv_send_wr wr, *bad = NULL;
	struct ibv_recv_wr rwr[2], *rbad = NULL;
	long posted[2] = { 0, 0 }, got[2] = { 0, 0 }, m;
	int s, rc;

	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_SEND;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	memset(rwr, 0, sizeof rwr);
	for (s = 0; s < 2; s++) {
		rwr[s].sg_list = &rsge[s];
		rwr[s].num_sge = 1;
		for (; posted[s] < PP_DEPTH; posted[s]++) {
			rwr[s].wr_id = posted[s];
			if (ibv_post_recv(qp[s], &rwr[s], &rbad))
				return -1;
		}
	}
	for (m = 0; m < N; m++) {
		s = m % 2;
		if (m > 0) {
			if ((rc = poll_one(rcq[s], got[s]++)))
				return rc;
			if (posted[s] < N / 2) {
				rwr[s].wr_id = posted[s]++;
				if (ibv_post_recv(qp[s], &rwr[s], &rbad))
					return -1;
			}
		}
		wr.wr_id = m;
		if (ibv_post_send(qp[s], &wr, &bad))
			return -1;
		settle();
		if ((rc = poll_one(cq[s], m)))
			return rc;
	}
	/* The last message's receiver (side 0, N being even). */
	return poll_one(rcq[0], got[0]);
}

/* The measured function of --pingpong. */
MEASURED int run_loop_pingpong(struct ibv_qp **qp, struct ibv_cq **cq, struct ibv_cq **rcq, struct ibv_mr *src,
			       struct ibv_mr *dst)
{
	return pingpong_body(qp, cq, rcq, src, dst);
}

/* The same sequence, not counted. */
MEASURED int warm_up_pingpong(struct ibv_qp **qp, struct ibv_cq **cq, struct ibv_cq **rcq, struct ibv_mr *src,
			      struct ibv_mr *dst)
{
	return pingpong_body(qp, cq, rcq, src, dst);
}

/* The measured function of --send. */
MEASURED int run_loop_send(struct ibv_qp *a, struct ibv_cq *cq_a, struct ibv_qp *b, struct ibv_cq *cq_b,
			   struct ibv_mr *src, struct ibv_mr *dst)
{
	return send_body(a, cq_a, b, cq_b, src, dst);
}

/* The same sequence, not counted. */
MEASURED int warm_up_send(struct ibv_qp *a, struct ibv_cq *cq_a, struct ibv_qp *b, struct ibv_cq *cq_b,
			  struct ibv_mr *src, struct ibv_mr *dst)
{
	return send_body(a, cq_a, b, cq_b, src, dst);
}

/* The measured function: nothing but the post/poll loop. */
MEASURED int run_loop(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, struct ibv_mr *dst)
{
	return loop_body(qp, cq, src, dst);
}

/* The same sequence, not counted. */
MEASURED int warm_up(struct ibv_qp *qp, struct ibv_cq *cq, struct ibv_mr *src, struct ibv_mr *dst)
{
	return loop_body(qp, cq, src, dst);
}

/* ---- --tokens: the scope path's book-keeping, by hand (see the head of this file) ---- */

/* A view of registered local memory, as the typed `LocalBuf` (32 bytes). */
struct view {
	uint64_t addr;
	uint32_t len, lkey;
	uint64_t odp; /* 0: pinned memory */
	const void *pd;
};

struct remote_slice {
	uint64_t addr, len;
	uint32_t rkey;
};

struct write_req {
	struct view local;
	struct remote_slice remote;
};

/* One send queue's book. */
struct book {
	atomic_uint ticket, serving; /* a ticket lock */
	atomic_bool broken;
	atomic_uint_fast64_t done_pub; /* `done`, published for the lock-free implied check */
	uint64_t next, done, force_at, signal_every, mask;
	uint32_t depth;
	uint64_t owners[64];
};

struct tracked_qp {
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	const void *pd;
	uint32_t max_send_sge;
	struct book b;
};

struct token {
	struct tracked_qp *q;
	uint64_t seq;
	struct view buf;
};

static struct ibv_wc implied_wc;

static inline __attribute__((always_inline)) void book_lock(struct book *b)
{
	unsigned t = atomic_fetch_add_explicit(&b->ticket, 1, memory_order_acquire);

	while (atomic_load_explicit(&b->serving, memory_order_acquire) != t)
		;
}

static inline __attribute__((always_inline)) void book_unlock(struct book *b)
{
	atomic_fetch_add_explicit(&b->serving, 1, memory_order_release);
}

static inline __attribute__((always_inline)) int post_write(struct tracked_qp *q, const struct write_req *w,
							      int signaled, uint64_t owner, struct token *tok)
{
	struct ibv_sge sge = { .addr = w->local.addr, .length = w->local.len, .lkey = w->local.lkey };
	struct ibv_send_wr wr, *bad = NULL;
	struct book *b = &q->b;
	uint64_t seq;

	if (w->local.len > w->remote.len || w->local.pd != q->pd || w->local.odp)
		return -1;
	memset(&wr, 0, sizeof wr);
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = w->local.len != 0;
	if ((uint32_t)wr.num_sge > q->max_send_sge)
		return -1;
	wr.wr.rdma.remote_addr = w->remote.addr;
	wr.wr.rdma.rkey = w->remote.rkey;
	wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
	book_lock(b);
	if (atomic_load_explicit(&b->broken, memory_order_acquire) || b->next - b->done >= b->depth) {
		book_unlock(b);
		return -2;
	}
	if (!signaled && b->next >= b->force_at)
		wr.send_flags |= IBV_SEND_SIGNALED;
	seq = b->next;
	wr.wr_id = seq;
	if (ibv_post_send(q->qp, &wr, &bad)) {
		book_unlock(b);
		return -3;
	}
	b->owners[seq & b->mask] = owner;
	b->next = seq + 1;
	if (wr.send_flags & IBV_SEND_SIGNALED)
		b->force_at = seq + b->signal_every;
	book_unlock(b);
	tok->q = q;
	tok->seq = seq;
	tok->buf = w->local;
	return 0;
}

/* The wait of a signaled token: its completion polled, `done` moved past it and published. */
static inline __attribute__((always_inline)) int wait_polled(struct token *t, struct ibv_wc *wc, struct view *buf)
{
	struct book *b = &t->q->b;
	int n;

	while ((n = ibv_poll_cq(t->q->cq, 1, wc)) == 0)
		empty_polls++;
	if (n < 0 || wc->wr_id != t->seq)
		return -3;
	book_lock(b);
	b->done = t->seq + 1;
	atomic_store_explicit(&b->done_pub, b->done, memory_order_release);
	book_unlock(b);
	*buf = t->buf;
	return wc->status == IBV_WC_SUCCESS ? 0 : -4;
}

/* The wait of an unsignaled token a later completion covers: one load, no poll, no lock. */
static inline __attribute__((always_inline)) int wait_implied(struct token *t, struct ibv_wc *wc, struct view *buf)
{
	if (t->seq >= atomic_load_explicit(&t->q->b.done_pub, memory_order_acquire))
		return -5;
	*wc = implied_wc;
	*buf = t->buf;
	return wc->status == IBV_WC_SUCCESS ? 0 : -4;
}

static inline __attribute__((always_inline)) int tokens_body(struct tracked_qp *q, struct view src,
							       struct remote_slice dst)
{
	struct token unsignaled[SIGNAL_EVERY];
	int n = 0, i, k, rc;

	for (i = 0; i < N; i++) {
		struct write_req w = { src, dst };
		struct ibv_wc wc;
		struct view buf;
		struct token tok;

		if ((i + 1) % SIGNAL_EVERY != 0 && i != N - 1) {
			if ((rc = post_write(q, &w, 0, 1, &unsignaled[n])))
				return rc;
			n++;
			continue;
		}
		if ((rc = post_write(q, &w, 1, 1, &tok)))
			return rc;
		settle();
		if ((rc = wait_polled(&tok, &wc, &buf)))
			return rc;
		for (k = 0; k < n; k++)
			if ((rc = wait_implied(&unsignaled[k], &wc, &buf)))
				return rc;
		n = 0;
	}
	return 0;
}

/* The measured function of --tokens. */
MEASURED int run_loop_tokens(struct tracked_qp *q, struct view src, struct remote_slice dst)
{
	return tokens_body(q, src, dst);
}

/* The same sequence, not counted. */
MEASURED int warm_up_tokens(struct tracked_qp *q, struct view src, struct remote_slice dst)
{
	return tokens_body(q, src, dst);
}

static struct ibv_qp *create_qp(struct ibv_pd *pd, struct ibv_cq *cq, struct ibv_cq *rcq)
{
	struct ibv_qp_init_attr init = {
		.send_cq = cq,
		.recv_cq = rcq,
		.cap = { .max_send_wr = 64, .max_recv_wr = SIGNAL_EVERY, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 0,
	};
	struct ibv_qp *qp = ibv_create_qp(pd, &init);
	if (!qp)
		die("ibv_create_qp");
	return qp;
}

int main(int argc, char **argv)
{
	int send = argc > 1 && !strcmp(argv[1], "--send");
	int pingpong = argc > 1 && !strcmp(argv[1], "--pingpong");
	int tokens = argc > 1 && !strcmp(argv[1], "--tokens");
	if (send || pingpong || tokens) {
		argc--;
		argv++;
	}
	const char *name = argc > 1 ? argv[1] : getenv("TYPED_VERBS_DEVICE");
	const char *gid_env = argc > 2 ? argv[2] : getenv("TYPED_VERBS_GID_INDEX");
	int gid_index = gid_env ? atoi(gid_env) : 1;
	union ibv_gid gid;
	int rc;

	if (!name)
		name = "rxe0";
	struct ibv_context *ctx = open_device(name);
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	if (!pd)
		die("ibv_alloc_pd");
	/* Page-aligned and zeroed, as the typed library allocates its regions. */
	void *src_mem = aligned_alloc(4096, 4096), *dst_mem = aligned_alloc(4096, 4096);
	if (!src_mem || !dst_mem)
		die("aligned_alloc");
	memset(src_mem, 0xab, 4096);
	memset(dst_mem, 0, 4096);
	struct ibv_mr *src = ibv_reg_mr(pd, src_mem, 4096, 0);
	struct ibv_mr *dst =
		ibv_reg_mr(pd, dst_mem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!src || !dst)
		die("ibv_reg_mr");
	struct ibv_cq *cq_a = ibv_create_cq(ctx, 64, NULL, NULL, 0), *cq_b = ibv_create_cq(ctx, 64, NULL, NULL, 0);
	/* --pingpong: receives complete on CQs of their own, as in perftest's send_lat. */
	struct ibv_cq *rcq_a = pingpong ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : cq_a;
	struct ibv_cq *rcq_b = pingpong ? ibv_create_cq(ctx, 64, NULL, NULL, 0) : cq_b;
	if (!cq_a || !cq_b || !rcq_a || !rcq_b)
		die("ibv_create_cq");
	struct ibv_qp *a = create_qp(pd, cq_a, rcq_a), *b = create_qp(pd, cq_b, rcq_b);
	struct ibv_qp *qps[2] = { a, b };
	struct ibv_cq *cqs[2] = { cq_a, cq_b }, *rcqs[2] = { rcq_a, rcq_b };
	if (ibv_query_gid(ctx, PORT, gid_index, &gid))
		die("ibv_query_gid");
	const char *step;
	if ((step = rc_connect(a, PORT, 0x1000, b->qp_num, 0x2000, &gid, gid_index)) ||
	    (step = rc_connect(b, PORT, 0x2000, a->qp_num, 0x1000, &gid, gid_index)))
		die(step);

	if (tokens) {
		/* The typed QP's send queue: 64 entries, a forced signal every 32. */
		static struct tracked_qp tq;
		struct view sv = { .addr = (uintptr_t)src->addr, .len = MSG, .lkey = src->lkey, .pd = pd };
		struct remote_slice dv = { .addr = (uintptr_t)dst->addr, .len = 4096, .rkey = dst->rkey };

		tq.qp = a;
		tq.cq = cq_a;
		tq.pd = pd;
		tq.max_send_sge = 1;
		tq.b.depth = 64;
		tq.b.mask = 63;
		tq.b.signal_every = 32;
		tq.b.force_at = 31;
		implied_wc.status = IBV_WC_SUCCESS;
		implied_wc.opcode = IBV_WC_RDMA_WRITE;
		implied_wc.qp_num = a->qp_num;
		if ((rc = warm_up_tokens(&tq, sv, dv))) {
			fprintf(stderr, "raw: warm-up failed (%d)\n", rc);
			return 1;
		}
		empty_polls = 0;
		if ((rc = run_loop_tokens(&tq, sv, dv))) {
			fprintf(stderr, "raw: run_loop_tokens failed (%d)\n", rc);
			return 1;
		}
	}
	rc = tokens ? 0
	     : pingpong ? warm_up_pingpong(qps, cqs, rcqs, src, dst)
	     : send   ? warm_up_send(a, cq_a, b, cq_b, src, dst)
		      : warm_up(a, cq_a, src, dst);
	if (rc) {
		fprintf(stderr, "raw: warm-up failed (%d)\n", rc);
		return 1;
	}
	if (!tokens)
		empty_polls = 0;
	rc = tokens ? 0
	     : pingpong ? run_loop_pingpong(qps, cqs, rcqs, src, dst)
	     : send   ? run_loop_send(a, cq_a, b, cq_b, src, dst)
		      : run_loop(a, cq_a, src, dst);
	if (rc) {
		fprintf(stderr, "raw: run_loop failed (%d)\n", rc);
		return 1;
	}
	if (memcmp(src_mem, dst_mem, MSG) || (pingpong && memcmp(src_mem, (char *)dst_mem + MSG, MSG))) {
		fprintf(stderr, "raw: target does not hold the written bytes\n");
		return 1;
	}
	if (pingpong)
		printf("raw: %d SENDs of %d bytes, ping-pong, every one signaled: ok; empty polls in run_loop: %ld\n", N,
		       MSG, empty_polls);
	else
		printf("raw: %d %s of %d bytes, every %dth signaled: ok; empty polls in run_loop: %ld\n", N,
		       send ? "SENDs (and receives)" : tokens ? "RDMA WRITEs with tokens" : "RDMA WRITEs", MSG,
		       SIGNAL_EVERY, empty_polls);

	ibv_destroy_qp(a);
	ibv_destroy_qp(b);
	ibv_destroy_cq(cq_a);
	ibv_destroy_cq(cq_b);
	if (pingpong) {
		ibv_destroy_cq(rcq_a);
		ibv_destroy_cq(rcq_b);
	}
	ibv_dereg_mr(src);
	ibv_dereg_mr(dst);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	free(src_mem);
	free(dst_mem);
	return 0;
}
