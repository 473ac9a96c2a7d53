/* A connection's RC QP: created through librdmacm on its own context, or
 * on the device record's own context (a forked child's) and then moved
 * through INIT, RTR and RTS here, with the attributes rdma_cm computes. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "base/guard.h"
#include "core/qp.h"
#include "core/verbs_fence.h"

/* The attribute bits 21-24 are RoCE's; older kernels set them for an
 * InfiniBand port too, and librdmacm masks them off there. */
#define ROCE_ONLY_ATTR_BITS 0xe00000

static bool on_ib_link_layer(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	struct ibv_port_attr port;

	return ibv_query_port(qp->context, id->port_num, &port) == 0 &&
	       port.link_layer == IBV_LINK_LAYER_INFINIBAND;
}

/* Moves qp to state with the attributes rdma_cm gives for the id.
 * rd_atomic, when nonzero, replaces the RDMA READ depth (as librdmacm
 * does with the depths of the accept). */
static int move_to(struct rdma_cm_id *id, struct ibv_qp *qp, enum ibv_qp_state state,
		   uint8_t rd_atomic)
{
	struct ibv_qp_attr attr;
	int mask = 0, rc;

	memset(&attr, 0, sizeof(attr));
	attr.qp_state = state;
	if (rdma_init_qp_attr(id, &attr, &mask) != 0)
		return errno ? -errno : -EINVAL;
	if (state == IBV_QPS_RTR && on_ib_link_layer(id, qp))
		mask &= ~ROCE_ONLY_ATTR_BITS;
	if (rd_atomic && state == IBV_QPS_RTR)
		attr.max_dest_rd_atomic = rd_atomic;
	if (rd_atomic && state == IBV_QPS_RTS)
		attr.max_rd_atomic = rd_atomic;
	rc = ibv_modify_qp(qp, &attr, mask);
	return rc ? -rc : 0;
}

/* INIT again (the connection's access rights are known only once the
 * CM exchange has begun: an active QP went to INIT with none), then RTR
 * and RTS, as librdmacm moves its own. */
static int move_to_rts(struct rdma_cm_id *id, struct ibv_qp *qp, uint8_t resp_res,
		       uint8_t init_depth)
{
	int err = move_to(id, qp, IBV_QPS_INIT, 0);

	if (!err)
		err = move_to(id, qp, IBV_QPS_RTR, resp_res);
	if (!err)
		err = move_to(id, qp, IBV_QPS_RTS, init_depth);
	return err;
}

int qp_create(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp_init_attr *attr,
	      struct ibv_qp **out)
{
	struct ibv_qp *qp;
	int err;

	if (!dev->own_ctx) {
		if (rdma_create_qp(id, dev->pd, attr) != 0)
			return errno ? -errno : -EINVAL;
		*out = id->qp;
		return 0;
	}
	qp = ibv_create_qp(dev->pd, attr);
	if (!qp)
		return errno ? -errno : -ENOMEM;
	err = move_to(id, qp, IBV_QPS_INIT, 0);
	if (err) {
		ibv_destroy_qp(qp);
		return err;
	}
	*out = qp;
	return 0;
}

void qp_destroy(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp *qp)
{
	if (!qp)
		return;
	if (dev && dev->own_ctx)
		ibv_destroy_qp(qp);
	else
		rdma_destroy_qp(id);
}

void qp_before_connect(struct sdp_dev *dev, struct ibv_qp *qp, struct rdma_conn_param *param)
{
	if (dev->own_ctx)
		param->qp_num = qp->qp_num;
}

int qp_accept(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp *qp,
	      struct rdma_conn_param *param)
{
	int err;

	if (dev->own_ctx) {
		param->qp_num = qp->qp_num;
		err = move_to_rts(id, qp, param->responder_resources, param->initiator_depth);
		if (err) {
			errno = -err;
			return -1;
		}
	}
	return rdma_accept(id, param);
}

int qp_on_connect_response(struct rdma_cm_id *id, struct ibv_qp *qp)
{
	int err;

	VERBS_CTL_ENTER();
	err = move_to_rts(id, qp, 0, 0);
	if (!err && rdma_establish(id) != 0)
		err = errno ? -errno : -EIO;
	VERBS_CTL_LEAVE();
	return err;
}

void qp_before_disconnect(struct sdp_dev *dev, struct ibv_qp *qp)
{
	struct ibv_qp_attr attr = { .qp_state = IBV_QPS_ERR };

	if (dev && dev->own_ctx && qp)
		ibv_modify_qp(qp, &attr, IBV_QP_STATE);
}
