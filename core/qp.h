/* A connection's RC QP, whichever context it lives on.  Normally the
 * device record's context is the one librdmacm opened, and librdmacm moves
 * the QP through its states.  In a forked child that context is the
 * parent's (librdmacm opens each device once per process and the child
 * inherits it; the kernel refuses verbs commands written to it from
 * another process), so the record opens a context of its own, and these
 * functions move the QP themselves with the states rdma_cm computes. */
#ifndef SDPSHIM_QP_H
#define SDPSHIM_QP_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "core/dev.h"

/* Creates the QP on dev's PD and makes it ready for receives (INIT);
 * attr->cap is updated as for rdma_create_qp.  0 or -errno. */
int qp_create(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp_init_attr *attr,
	      struct ibv_qp **out);
void qp_destroy(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp *qp);

/* Before rdma_connect: names our QP in param. */
void qp_before_connect(struct sdp_dev *dev, struct ibv_qp *qp, struct rdma_conn_param *param);
/* rdma_accept, our own QP first named in param and moved to RTR and RTS,
 * as librdmacm does for its own.  0, or -1 with errno. */
int qp_accept(struct sdp_dev *dev, struct rdma_cm_id *id, struct ibv_qp *qp,
	      struct rdma_conn_param *param);
/* RDMA_CM_EVENT_CONNECT_RESPONSE (an active id whose QP librdmacm does not
 * know): RTR, RTS, then rdma_establish sends the RTU.  0 or -errno.  The
 * event then counts as ESTABLISHED. */
int qp_on_connect_response(struct rdma_cm_id *id, struct ibv_qp *qp);
/* Before rdma_disconnect: librdmacm flushes only a QP it knows. */
void qp_before_disconnect(struct sdp_dev *dev, struct ibv_qp *qp);

#endif
