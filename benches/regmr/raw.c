/*
 * raw.c: the hand-written libibverbs reference of the registration benchmark (scripts/bench,
 * test `regmr`), the C side of examples/regmr.rs.
 *
 * For each size (4 KiB, 2 MiB, 1 GiB), maps one anonymous private buffer (mmap: whole pages,
 * page-aligned) and writes every byte (so that registration pins pages that exist), as the
 * Rust side does with its own memmap2 mapping, then
 * times ITERS rounds of ibv_reg_mr + ibv_dereg_mr of the whole buffer with
 * IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, after one round
 * that is not timed. Prints one line per size:
 *
 *   regmr c size=BYTES iters=N median_ns=M min_ns=M
 *
 * Page-aligned on purpose: Soft-RoCE of Linux 6.12 keeps a kmalloc'ed array of one entry per
 * page of a region, and for a 1 GiB buffer that does not start on a page (malloc's) the array
 * exceeds kmalloc's largest size: ibv_reg_mr fails with ENOMEM (and a kernel warning).
 *
 * Usage: raw [DEVICE] [ITER_SCALE] (defaults: $TYPED_VERBS_DEVICE or rxe0, 1; the rounds per
 * size are 2000, 200, 3, each multiplied by ITER_SCALE, at least 1). Build:
 * cc -O2 -g -o regmr-raw raw.c -libverbs
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>

#include "../common/util.h"

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	const char *name = argc > 1 ? argv[1] : getenv("TYPED_VERBS_DEVICE");
	double scale = argc > 2 ? atof(argv[2]) : 1.0;
	static const size_t sizes[] = { 4096, 2u << 20, 1u << 30 };
	static const int iters[] = { 2000, 200, 3 };
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_context *ctx = open_device(name ? name : "rxe0");
	struct ibv_pd *pd = ibv_alloc_pd(ctx);
	unsigned k;

	if (!pd)
		die("ibv_alloc_pd");
	for (k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		size_t size = sizes[k];
		int n = (int)(iters[k] * scale), i;
		long long *t;
		char *buf;

		if (n < 1)
			n = 1;
		t = calloc(n, sizeof(*t));
		if (!t)
			die("calloc");
		buf = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED)
			die("mmap");
		memset(buf, 1, size);
		for (i = -1; i < n; i++) {
			long long start = now_ns();
			struct ibv_mr *mr = ibv_reg_mr(pd, buf, size, access);

			if (!mr)
				die("ibv_reg_mr");
			if (ibv_dereg_mr(mr))
				die("ibv_dereg_mr");
			if (i >= 0)
				t[i] = now_ns() - start;
		}
		qsort(t, n, sizeof(*t), cmp_ll);
		printf("regmr c size=%zu iters=%d median_ns=%lld min_ns=%lld\n", size, n, t[n / 2], t[0]);
		fflush(stdout);
		munmap(buf, size);
		free(t);
	}
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	return 0;
}
