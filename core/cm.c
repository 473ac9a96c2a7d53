/* The process-wide rdma_cm event channel: created on first use, watched
 * by the progress thread, events dispatched by the kind of id context. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <string.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/real.h"
#include "base/self.h"
#include "core/conn_internal.h"
#include "core/cq.h" /* app_wake_atfork_child() */
#include "core/dev.h"
#include "core/link.h"
#include "core/listener.h"
#include "core/mrcache.h"
#include "core/progress.h"
#include "core/verbs_fence.h"
#include "core/wait_set.h"

static pthread_mutex_t cm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct rdma_event_channel *cm_channel;
static pid_t cm_channel_pid;
static struct progress_source cm_src;

static void dispatch(struct rdma_cm_event *ev)
{
	void *ctx = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST ? ev->listen_id->context
							       : ev->id->context;
	int kind = ctx ? *(int *)ctx : 0;

	sdp_debug("rdma_cm event %s (status %d)", rdma_event_str(ev->event), ev->status);
	if (ev->event == RDMA_CM_EVENT_DEVICE_REMOVAL && ev->id->verbs)
		dev_removed(ev->id->verbs);
	if (kind == CM_KIND_LISTENER)
		cm_listener_event(ctx, ev);
	else if (kind == CM_KIND_LINK)
		cm_link_event(ctx, ev);
	else if (kind == CM_KIND_CONN && ((struct sdp_conn *)ctx)->is_server)
		cm_server_conn_event(ctx, ev);
	else if (kind == CM_KIND_CONN)
		cm_client_event(ctx, ev);
}

static void on_cm_ready(struct progress_source *src, uint32_t events)
{
	struct rdma_cm_event *ev;

	(void)src;
	(void)events;
	for (;;) {
		VERBS_CTL_ENTER();
		int rc = rdma_get_cm_event(cm_channel, &ev);
		VERBS_CTL_LEAVE();
		if (rc != 0)
			return;
		dispatch(ev);
		VERBS_CTL_ENTER();
		rdma_ack_cm_event(ev);
		VERBS_CTL_LEAVE();
	}
}

/* The RC ack timeout (4.096 us << exponent) decides when an unacknowledged
 * packet is sent again.  rdma_cm's default suits hardware; an emulated host
 * that stalls for longer retransmits needlessly, and rxe in Linux 6.1 can
 * stall a QP on such duplicates, so the test bed sets a longer one. */
void cm_apply_ack_timeout(struct rdma_cm_id *id)
{
	uint8_t exp = (uint8_t)sdp_tun.ack_timeout;

	if (!exp)
		return;
	VERBS_CTL_ENTER();
	if (rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT, &exp, sizeof(exp)) != 0)
		sdp_info("cannot set the RC ack timeout (%s): rdma_cm's default applies",
			 strerror(errno));
	VERBS_CTL_LEAVE();
}

void cm_conn_param(struct rdma_conn_param *param, const void *private_data, uint8_t len)
{
	memset(param, 0, sizeof(*param));
	param->private_data = private_data;
	param->private_data_len = len;
	param->responder_resources = 1;
	param->initiator_depth = 1;
	param->retry_count = 7; /* a lost packet is retransmitted, never fatal at once */
	param->rnr_retry_count = 7;
}

int cm_resolve_route(struct rdma_cm_id *id)
{
	int rc;

	VERBS_CTL_ENTER();
	rc = rdma_resolve_route(id, (int)sdp_tun.connect_timeout_ms);
	VERBS_CTL_LEAVE();
	return rc;
}

int cm_channel_ensure(struct rdma_event_channel **out)
{
	int err = 0;

	pthread_mutex_lock(&cm_lock);
	if (!cm_channel || cm_channel_pid != self_pid()) {
		VERBS_CTL_ENTER();
		cm_channel = rdma_create_event_channel();
		VERBS_CTL_LEAVE();
		if (!cm_channel) {
			err = errno ? -errno : -ENODEV;
		} else {
			cm_channel->fd = progress_hide_fd(cm_channel->fd);
			real.fcntl(cm_channel->fd, F_SETFL,
				   real.fcntl(cm_channel->fd, F_GETFL) | O_NONBLOCK);
			cm_src.on_ready = on_cm_ready;
			err = progress_watch(cm_channel->fd, EPOLLIN, &cm_src);
			if (!err)
				cm_channel_pid = self_pid();
		}
	}
	*out = cm_channel;
	pthread_mutex_unlock(&cm_lock);
	return err;
}

void conn_layer_atfork_child(void)
{
	pthread_mutex_init(&cm_lock, NULL);
	dev_atfork_child(cm_channel ? cm_channel->fd : -1); /* every id hangs off cm_channel */
	cm_channel = NULL; /* the parent's; left alone */
	link_atfork_child();
	rdv_atfork_child();
	mrcache_atfork_child();
	progress_atfork_child();
	app_wake_atfork_child();
	wait_set_atfork_child();
	dev_after_fork_child();
}
