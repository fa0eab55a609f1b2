/*
 * rc_connect.h: the RC connection both C programs of the benchmarks use (benches/zerocost/raw.c,
 * benches/latency/threads.c): RESET -> INIT -> RTR -> RTS with the attributes of `perf`,
 * perftest and ibv_rc_pingpong (MTU 1024, timeout 14, retry 7, RNR retry 7, min RNR timer 12,
 * one outstanding read/atomic each way, a global route to `gid` through GID index `gid_index`).
 *
 * Returns NULL on success, else the name of the step that failed (errno tells why).
 */
#ifndef TYPED_VERBS_BENCH_RC_CONNECT_H
#define TYPED_VERBS_BENCH_RC_CONNECT_H

#include <stdint.h>
#include <string.h>

#include <infiniband/verbs.h>

static const char *rc_connect(struct ibv_qp *qp, uint8_t port, uint32_t my_psn, uint32_t dest_qpn,
			      uint32_t dest_psn, const union ibv_gid *gid, int gid_index)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = port;
	a.pkey_index = 0;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return "ibv_modify_qp INIT";

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = dest_qpn;
	a.rq_psn = dest_psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = *gid;
	a.ah_attr.grh.sgid_index = gid_index;
	a.ah_attr.grh.hop_limit = 64;
	a.ah_attr.port_num = port;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		return "ibv_modify_qp RTR";

	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_RTS;
	a.sq_psn = my_psn;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	if (ibv_modify_qp(qp, &a,
			  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				  IBV_QP_MAX_QP_RD_ATOMIC))
		return "ibv_modify_qp RTS";
	return NULL;
}

#endif
