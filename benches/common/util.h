/*
 * util.h: what both C programs of the benchmarks need besides rc_connect.h
 * (benches/zerocost/raw.c, benches/latency/threads.c): failing with the errno, the monotonic
 * clock, and opening a device by name. Messages start with the program's name. Include after
 * defining _GNU_SOURCE (for program_invocation_short_name).
 */
#ifndef TYPED_VERBS_BENCH_UTIL_H
#define TYPED_VERBS_BENCH_UTIL_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <infiniband/verbs.h>

/* Exits with status 1 after "PROG: WHAT failed: strerror(errno)". */
static void die(const char *what)
{
	fprintf(stderr, "%s: %s failed: %s\n", program_invocation_short_name, what, strerror(errno));
	exit(1);
}

/* CLOCK_MONOTONIC, in nanoseconds. */
static long long now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Opens the RDMA device called `name`; exits with status 1 if there is none or it cannot be
 * opened. */
static struct ibv_context *open_device(const char *name)
{
	struct ibv_device **list;
	struct ibv_context *ctx = NULL;
	int i, n;

	list = ibv_get_device_list(&n);
	if (!list)
		die("ibv_get_device_list");
	for (i = 0; i < n && !ctx; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx) {
		fprintf(stderr, "%s: device %s not found or not openable\n", program_invocation_short_name, name);
		exit(1);
	}
	return ctx;
}

#endif
