/*
 * threads.c: a control for the latency comparison (see BENCHMARKS.md, "Latency").
 *
 * perftest's ib_write_lat / ib_send_lat run their two sides as two processes; `perf` (this
 * library) runs them as two threads of one process. This program is neither: it is plain
 * libibverbs, with perftest's loops (run_iter_lat_write, run_iter_lat_send: busy-polling,
 * every request signaled, TX depth 1, no inline, send_lat with RX_DEPTH 512 receives on a CQ of
 * their own), arranged as `perf` arranges them: one process, one thread per side, each side
 * with its own context, PD, CQs and regions, two RC QPs connected to each other on one device.
 * So: this program next to perftest shows what the arrangement costs; `perf` next to this
 * program shows what the library costs.
 *
 * Output: perftest's latency line (#bytes #iterations t_min t_max t_typical t_avg, usec), with
 * perftest's formulas (half of each interval between two consecutive posts of the measuring
 * side; the 2 largest intervals left out; median as perftest's get_median), CLOCK_MONOTONIC.
 *
 * Usage: threads [-H] write|send [ITERS [DEVICE [GID_INDEX]]] (defaults: 1000,
 * $TYPED_VERBS_DEVICE or rxe0, $TYPED_VERBS_GID_INDEX or 1). -H first lists every latency kept,
 * sorted (`#, usec`, then `i, t`), as perftest's -H does. Every wait is bounded (30 s).
 * Build: cc -O2 -pthread -o threads threads.c -libverbs
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

#include "../common/rc_connect.h"
#include "../common/util.h"

#define SIZE 2
#define RX_DEPTH 512
#define PORT 1
#define TIMEOUT_NS (30LL * 1000 * 1000 * 1000)

enum { CLIENT, SERVER };

struct side {
	int role;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq, *rcq;
	struct ibv_qp *qp;
	struct ibv_mr *src, *dst;
	volatile char *src_mem, *dst_mem;
	/* The peer's region (write) */
	uint64_t peer_addr;
	uint32_t peer_rkey;
	long long *stamps;
	int failed;
};

static int send_test;
static long iters = 1000;
static volatile int server_ready;

/* Polls `cq` for one completion, busy (perftest's do { ibv_poll_cq } while (ne == 0)),
 * looking at the clock every 1024 empty polls. Returns 0 on a successful completion. */
static int poll_one(struct ibv_cq *cq)
{
	struct ibv_wc wc;
	long long deadline = 0;
	unsigned long spins = 0;
	int n;

	while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
		if ((++spins & 1023) == 0) {
			if (!deadline)
				deadline = now_ns() + TIMEOUT_NS;
			else if (now_ns() > deadline)
				return -1;
		}
	}
	return n < 0 || wc.status != IBV_WC_SUCCESS ? -1 : 0;
}

static int post(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->src_mem, .length = SIZE, .lkey = s->src->lkey };
	struct ibv_send_wr wr, *bad;

	memset(&wr, 0, sizeof wr);
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	if (send_test) {
		wr.opcode = IBV_WR_SEND;
	} else {
		wr.opcode = IBV_WR_RDMA_WRITE;
		wr.wr.rdma.remote_addr = s->peer_addr;
		wr.wr.rdma.rkey = s->peer_rkey;
	}
	return ibv_post_send(s->qp, &wr, &bad);
}

static int post_recv(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)s->dst_mem, .length = SIZE, .lkey = s->dst->lkey };
	struct ibv_recv_wr wr = { .sg_list = &sge, .num_sge = 1 }, *bad;

	return ibv_post_recv(s->qp, &wr, &bad);
}

/* perftest's run_iter_lat_write: wait for the peer's write to land in the last byte, write
 * back, poll the send CQ for that write's completion. */
static int write_loop(struct side *s)
{
	long scnt = 0, rcnt = 0;

	while (scnt < iters || rcnt < iters) {
		if (rcnt < iters && !(scnt < 1 && s->role == CLIENT)) {
			long long deadline = 0;
			unsigned long spins = 0;
			rcnt++;
			while (s->dst_mem[SIZE - 1] != (char)rcnt) {
				if ((++spins & 1023) == 0) {
					if (!deadline)
						deadline = now_ns() + TIMEOUT_NS;
					else if (now_ns() > deadline)
						return -1;
				}
			}
		}
		if (scnt < iters) {
			if (s->role == CLIENT)
				s->stamps[scnt] = now_ns();
			s->src_mem[SIZE - 1] = (char)++scnt;
			if (post(s) || poll_one(s->cq))
				return -1;
		}
	}
	return 0;
}

/* perftest's run_iter_lat_send (CQ moderation 1): wait for the peer's message (repost a
 * receive while more are needed), send, poll the send CQ for its completion. */
static int send_loop(struct side *s, long depth)
{
	long scnt = 0, rcnt = 0;

	while (scnt < iters || rcnt < iters) {
		if (rcnt < iters && !(scnt < 1 && s->role == CLIENT)) {
			if (poll_one(s->rcq))
				return -1;
			rcnt++;
			if (rcnt + depth <= iters && post_recv(s))
				return -1;
		}
		if (scnt < iters) {
			if (s->role == CLIENT)
				s->stamps[scnt] = now_ns();
			scnt++;
			if (post(s) || poll_one(s->cq))
				return -1;
		}
	}
	return 0;
}

static void *run_side(void *arg)
{
	struct side *s = arg;
	long depth = iters < RX_DEPTH ? iters : RX_DEPTH, i;

	if (send_test) {
		for (i = 0; i < depth; i++)
			if (post_recv(s)) {
				s->failed = 1;
				return NULL;
			}
		if (s->role == SERVER)
			__atomic_store_n(&server_ready, 1, __ATOMIC_RELEASE);
		else
			while (!__atomic_load_n(&server_ready, __ATOMIC_ACQUIRE))
				;
	}
	s->failed = send_test ? send_loop(s, depth) != 0 : write_loop(s) != 0;
	return NULL;
}

static void open_side(struct side *s, int role, const char *name)
{
	memset(s, 0, sizeof *s);
	s->role = role;
	s->ctx = open_device(name);
	s->pd = ibv_alloc_pd(s->ctx);
	if (!s->pd)
		die("ibv_alloc_pd");
	/* One buffer for every receive, as perftest has. */
	s->src_mem = aligned_alloc(4096, 4096);
	s->dst_mem = aligned_alloc(4096, 4096);
	if (!s->src_mem || !s->dst_mem)
		die("aligned_alloc");
	memset((void *)s->src_mem, 0, 4096);
	memset((void *)s->dst_mem, 0, 4096);
	s->src = ibv_reg_mr(s->pd, (void *)s->src_mem, 4096, 0);
	s->dst = ibv_reg_mr(s->pd, (void *)s->dst_mem, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
	if (!s->src || !s->dst)
		die("ibv_reg_mr");
	s->cq = ibv_create_cq(s->ctx, 16, NULL, NULL, 0);
	s->rcq = send_test ? ibv_create_cq(s->ctx, RX_DEPTH + 1, NULL, NULL, 0) : s->cq;
	if (!s->cq || !s->rcq)
		die("ibv_create_cq");
	struct ibv_qp_init_attr init = {
		.send_cq = s->cq,
		.recv_cq = s->rcq,
		.cap = { .max_send_wr = 1, .max_recv_wr = send_test ? RX_DEPTH : 1, .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
	};
	s->qp = ibv_create_qp(s->pd, &init);
	if (!s->qp)
		die("ibv_create_qp");
	s->stamps = calloc(iters, sizeof *s->stamps);
	if (!s->stamps)
		die("calloc");
}

static int cmp(const void *x, const void *y)
{
	long long a = *(const long long *)x, b = *(const long long *)y;
	return a < b ? -1 : a > b;
}

int main(int argc, char **argv)
{
	struct side a, b;
	union ibv_gid gid;
	pthread_t server;
	int histogram = argc > 1 && !strcmp(argv[1], "-H");

	if (histogram) {
		argc--;
		argv++;
	}
	if (argc < 2 || (strcmp(argv[1], "write") && strcmp(argv[1], "send"))) {
		fprintf(stderr, "usage: threads [-H] write|send [ITERS [DEVICE [GID_INDEX]]]\n");
		return 2;
	}
	send_test = !strcmp(argv[1], "send");
	if (argc > 2)
		iters = atol(argv[2]);
	if (iters < 5) {
		fprintf(stderr, "threads: ITERS must be at least 5\n");
		return 2;
	}
	const char *name = argc > 3 ? argv[3] : getenv("TYPED_VERBS_DEVICE");
	const char *gid_env = argc > 4 ? argv[4] : getenv("TYPED_VERBS_GID_INDEX");
	int gid_index = gid_env ? atoi(gid_env) : 1;
	if (!name)
		name = "rxe0";

	open_side(&a, CLIENT, name);
	open_side(&b, SERVER, name);
	if (ibv_query_gid(a.ctx, PORT, gid_index, &gid))
		die("ibv_query_gid");
	const char *step;
	if ((step = rc_connect(a.qp, PORT, 0x1000, b.qp->qp_num, 0x1100, &gid, gid_index)) ||
	    (step = rc_connect(b.qp, PORT, 0x1100, a.qp->qp_num, 0x1000, &gid, gid_index)))
		die(step);
	a.peer_addr = (uintptr_t)b.dst_mem;
	a.peer_rkey = b.dst->rkey;
	b.peer_addr = (uintptr_t)a.dst_mem;
	b.peer_rkey = a.dst->rkey;

	if (pthread_create(&server, NULL, run_side, &b))
		die("pthread_create");
	run_side(&a);
	pthread_join(server, NULL);
	if (a.failed || b.failed) {
		fprintf(stderr, "threads: %s side failed (a completion error or a 30 s timeout)\n",
			a.failed ? "client" : "server");
		return 1;
	}

	/* perftest's statistics: intervals between consecutive posts, the 2 largest left out. */
	long samples = iters - 1, m = samples - 2, i;
	long long *delta = malloc(samples * sizeof *delta);
	if (!delta)
		die("malloc");
	for (i = 0; i < samples; i++)
		delta[i] = a.stamps[i + 1] - a.stamps[i];
	qsort(delta, samples, sizeof *delta, cmp);
	double median = (m - 1) % 2 == 1 ? (delta[m / 2] + delta[m / 2 - 1]) / 2.0 : delta[m / 2];
	double sum = 0;
	for (i = 0; i < m; i++)
		sum += delta[i];
	if (histogram) {
		printf("#, usec\n");
		for (i = 0; i < m; i++)
			printf("%ld, %.3f\n", i + 1, delta[i] / 2000.0);
	}
	printf("threads (C, perftest's %s_lat loop, one process, a thread per side)\n", send_test ? "send" : "write");
	printf(" #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]\n");
	printf(" %-6d %-11ld    %-11.2f    %-11.2f  %-15.2f    %-11.2f\n", SIZE, iters, delta[0] / 2000.0,
	       delta[m] / 2000.0, median / 2000.0, sum / m / 2000.0);
	return 0;
}
