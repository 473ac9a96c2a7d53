/* Per-device protection domains and completion channels, registration of
 * the channel buffers, and the release of a removed device's resources. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/config.h"
#include "base/guard.h"
#include "base/log.h"
#include "base/pin_budget.h"
#include "base/real.h"
#include "core/cq.h" /* cq_on_channel_ready() */
#include "core/dev.h"
#include "core/mrcache.h"
#include "core/verbs_fence.h"

#define RELEASE_LOOK_MS 50u
#define RELEASE_LOOKS 100u /* 5 s for the kernel to unlist a device it removes */

static pthread_mutex_t dev_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sdp_dev *dev_list;
static _Atomic unsigned dev_gen;
static int placeholder_fd = -1; /* what a removed device's fds become */
static bool contexts_inherited; /* a forked child: librdmacm's contexts are the parent's */
/* The device lists of this process's ancestors, one per generation. */
#define INHERITED_GENERATIONS 8
static struct sdp_dev *inherited[INHERITED_GENERATIONS];
static unsigned inherited_count;
/* Their rdma_cm event channels: the kernel waits for every holder of the
 * file before a device with ids in it can go. */
static int inherited_cm_fds[INHERITED_GENERATIONS];
static unsigned inherited_cm_count;
static struct progress_timer release_timer;
static unsigned release_looks_left;

/* A completion channel the progress thread watches (non-blocking, hidden). */
static struct ibv_comp_channel *open_channel(struct ibv_context *ctx, struct progress_source *src,
					     void (*on_ready)(struct progress_source *, uint32_t),
					     uint32_t events)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);

	if (!ch)
		return NULL;
	ch->fd = progress_hide_fd(ch->fd);
	real.fcntl(ch->fd, F_SETFL, real.fcntl(ch->fd, F_GETFL) | O_NONBLOCK);
	src->on_ready = on_ready;
	if (progress_watch(ch->fd, events, src) != 0) {
		ibv_destroy_comp_channel(ch);
		return NULL;
	}
	return ch;
}

static void close_channel(struct ibv_comp_channel *ch)
{
	if (!ch)
		return;
	progress_unwatch(ch->fd);
	ibv_destroy_comp_channel(ch);
}

/* The context a new record works on: librdmacm's, or in a forked child a
 * context of our own for the same device (core/qp.h says why). */
static struct ibv_context *context_for(struct ibv_context *cm_ctx, bool *own)
{
	struct ibv_context *ctx;

	*own = false;
	if (!contexts_inherited)
		return cm_ctx;
	ctx = ibv_open_device(cm_ctx->device);
	if (!ctx) {
		sdp_warn("device %s: cannot open a context of this process's own: %s",
			 ibv_get_device_name(cm_ctx->device), strerror(errno));
		return NULL;
	}
	*own = true;
	return ctx;
}

static struct sdp_dev *dev_create(struct ibv_context *cm_ctx)
{
	struct sdp_dev *d = calloc(1, sizeof(*d));
	struct ibv_device_attr attr;
	struct ibv_context *ctx;

	if (!d)
		return NULL;
	ctx = context_for(cm_ctx, &d->own_ctx);
	if (!ctx) {
		free(d);
		return NULL;
	}
	d->cm_ctx = cm_ctx;
	d->ctx = ctx;
	d->device = ctx->device;
	d->ctx_cmd_fd = ctx->cmd_fd;
	d->ctx_async_fd = ctx->async_fd;
	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(ctx->device));
	d->pd = ibv_alloc_pd(ctx);
	if (d->pd)
		d->cc = open_channel(ctx, &d->cc_src, cq_on_channel_ready, EPOLLIN);
	/* Exclusive: an app thread asleep on the links' channel takes the
	 * wake-up alone; this watch is the backstop (core/app_wake.c). */
	if (d->cc)
		d->link_cc = open_channel(ctx, &d->link_cc_src, cq_on_link_channel_ready,
					  EPOLLIN | EPOLLEXCLUSIVE);
	if (!d->link_cc) {
		sdp_warn("device %s: cannot allocate PD/completion channels: %s",
			 ibv_get_device_name(ctx->device), strerror(errno));
		close_channel(d->cc);
		if (d->pd)
			ibv_dealloc_pd(d->pd);
		if (d->own_ctx)
			ibv_close_device(ctx);
		free(d);
		return NULL;
	}
	if (ibv_query_device(ctx, &attr) == 0)
		d->mw_type2 = (attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
	if (!d->mw_type2)
		sdp_info("device %s has no type 2 memory windows: zero-copy off",
			 ibv_get_device_name(ctx->device));
	sdp_debug("device %s ready", ibv_get_device_name(ctx->device));
	dev_watch_start();
	return d;
}

/* The kernel's device list, as libibverbs reads it (NULL: cannot tell). */
static struct ibv_device **devices_listed(void)
{
	struct ibv_device **list;

	VERBS_CTL_ENTER();
	list = ibv_get_device_list(NULL);
	VERBS_CTL_LEAVE();
	return list;
}

static void devices_listed_free(struct ibv_device **list)
{
	VERBS_CTL_ENTER();
	if (list)
		ibv_free_device_list(list);
	VERBS_CTL_LEAVE();
}

/* Compares pointers only: device may be gone. */
static bool in_list(struct ibv_device **list, const struct ibv_device *device)
{
	for (int i = 0; list && list[i]; i++)
		if (list[i] == device)
			return true;
	return false;
}

/* Is the device still registered?  An id resolved just before the device
 * went must not open new resources on it: they would hold its removal. */
static bool device_listed(const struct ibv_device *device)
{
	struct ibv_device **list = devices_listed();
	bool found = in_list(list, device);

	devices_listed_free(list);
	return found;
}

struct sdp_dev *dev_get(struct ibv_context *ctx)
{
	struct sdp_dev *d;

	pthread_mutex_lock(&dev_lock);
	for (d = dev_list; d; d = d->next)
		if (d->cm_ctx == ctx && !d->retired)
			break;
	if (!d && device_listed(ctx->device)) {
		VERBS_CTL_ENTER();
		d = dev_create(ctx);
		VERBS_CTL_LEAVE();
		if (d) {
			d->next = dev_list;
			dev_list = d;
			atomic_fetch_add(&dev_gen, 1);
		}
	}
	if (d && atomic_load(&d->removed))
		d = NULL;
	if (d)
		atomic_fetch_add(&d->conns, 1);
	pthread_mutex_unlock(&dev_lock);
	return d;
}

/* The pages are taken from the pinned-memory budget first (unused cached
 * zero-copy registrations make room) and given back once deregistered
 * (dev_free_registered). */
void *dev_alloc_registered(struct sdp_dev *dev, size_t len, struct ibv_mr **mr, int *err)
{
	size_t pinned = pin_pages_len(len);
	void *mem;

	if (!mrcache_budget_take(pinned)) {
		*err = -ENOBUFS;
		return NULL;
	}
	mem = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mem == MAP_FAILED) {
		pin_budget_give(pinned);
		*err = -ENOMEM;
		return NULL;
	}
	/* A forked child never touches the library's buffers, and the kernel
	 * copies pinned pages into each child at fork: they stay out of it. */
	(void)syscall(SYS_madvise, mem, len, MADV_DONTFORK);
	SDP_GUARD_ENTER();
	*mr = ibv_reg_mr(dev->pd, mem, len, IBV_ACCESS_LOCAL_WRITE);
	SDP_GUARD_LEAVE();
	if (!*mr) {
		*err = errno ? -errno : -ENOMEM;
		munmap(mem, len);
		pin_budget_give(pinned);
		return NULL;
	}
	return mem;
}

void dev_free_registered(void *mem, size_t len, struct ibv_mr *mr)
{
	if (mr) {
		SDP_GUARD_ENTER();
		ibv_dereg_mr(mr);
		SDP_GUARD_LEAVE();
		pin_budget_give(pin_pages_len(len));
	}
	if (mem)
		munmap(mem, len);
}

void dev_conn_added(struct sdp_dev *dev)
{
	atomic_fetch_add(&dev->conns, 1);
}

/* ------------------------------------------------- a removed device */

/* A read-only /dev/null: never readable as an event, every verbs command
 * on it fails (ioctl ENOTTY, write EBADF).  What a released fd becomes. */
static int placeholder(void)
{
	if (placeholder_fd < 0)
		placeholder_fd = progress_hide_fd(open("/dev/null", O_RDONLY | O_CLOEXEC));
	return placeholder_fd;
}

/* fd's number now holds the placeholder: its file goes, and with it the
 * hold on the device; a thread that still reads it reads nothing, and
 * never an fd the app got since. */
static void fd_release_in_place(int fd, const char *what)
{
	if (placeholder() < 0 || real.dup3(placeholder_fd, fd, O_CLOEXEC) < 0)
		sdp_error("a removed device's %s stays open: %s", what, strerror(errno));
}

static void channel_retire(struct ibv_comp_channel *ch)
{
	progress_unwatch(ch->fd);
	fd_release_in_place(ch->fd, "completion channel");
}

/* Is fd still the file we took it for?  Its number may have been closed
 * and handed out again; then it is left alone. */
static bool fd_is(int fd, const char *prefix)
{
	char path[40], target[128];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	return strncmp(target, prefix, strlen(prefix)) == 0;
}

/* The context librdmacm opened for the device (our records use it) holds
 * the device too, and librdmacm closes it only when it re-reads the device
 * list, which it does when asked for devices (that opens every other
 * device and keeps it) or when an id meets a device it does not know, and
 * never while the list is empty.  So once the kernel has unlisted the
 * device, its two files are released in place, each only if its number
 * still names that kind of file.  librdmacm's later calls on the context
 * fail harmlessly, and it closes the numbers when it drops the context. */
static void context_release(struct sdp_dev *d)
{
	if (fd_is(d->ctx_cmd_fd, "/dev/infiniband/uverbs"))
		fd_release_in_place(d->ctx_cmd_fd, "context");
	if (fd_is(d->ctx_async_fd, "anon_inode:[infinibandevent]"))
		fd_release_in_place(d->ctx_async_fd, "context's event queue");
}

static void release_look(void *arg)
{
	struct ibv_device **list = devices_listed();
	bool pending = false;

	(void)arg;
	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d; d = d->next) {
		if (d->ctx_release_due && list && !in_list(list, d->device)) {
			context_release(d);
			d->ctx_release_due = false;
		}
		pending |= d->ctx_release_due;
	}
	pthread_mutex_unlock(&dev_lock);
	devices_listed_free(list);
	if (pending && --release_looks_left > 0)
		progress_timer_arm(&release_timer, progress_now_ms() + RELEASE_LOOK_MS);
	else if (pending)
		sdp_warn("a removed device is still listed after %u ms", RELEASE_LOOK_MS * RELEASE_LOOKS);
}

static void retire_on_progress(void *arg)
{
	struct sdp_dev *d = arg;

	pthread_mutex_lock(&dev_lock);
	if (d->retired || atomic_load(&d->conns) > 0) {
		pthread_mutex_unlock(&dev_lock);
		return;
	}
	d->retired = true;
	d->ctx_release_due = true;
	atomic_fetch_add(&dev_gen, 1);
	pthread_mutex_unlock(&dev_lock);
	mrcache_flush_dev(d);
	channel_retire(d->cc);
	channel_retire(d->link_cc);
	VERBS_CTL_ENTER();
	if (ibv_dealloc_pd(d->pd) != 0)
		sdp_warn("device %s: its protection domain is still in use", d->name);
	VERBS_CTL_LEAVE();
	d->pd = NULL;
	sdp_info("device %s removed: its resources are released", d->name);
	release_timer.fn = release_look;
	release_looks_left = RELEASE_LOOKS;
	progress_timer_arm(&release_timer, progress_now_ms());
}

static void retire_when_unused(struct sdp_dev *d)
{
	if (atomic_load(&d->conns) == 0 && progress_defer(retire_on_progress, d) != 0)
		sdp_error("device %s: cannot queue its release: out of memory", d->name);
}

/* The first sign that d's device went: d takes no new user, and goes once
 * its last one has. */
static void mark_removed(struct sdp_dev *d)
{
	if (atomic_exchange(&d->removed, true))
		return;
	sdp_warn("device %s removed: its connections move to TCP, and its resources go once they have",
		 d->name);
	retire_when_unused(d);
}

void dev_removed(struct ibv_context *ctx)
{
	struct sdp_dev *d;

	pthread_mutex_lock(&dev_lock);
	for (d = dev_list; d; d = d->next)
		if (d->cm_ctx == ctx && !d->retired)
			break;
	pthread_mutex_unlock(&dev_lock);
	if (d)
		mark_removed(d);
}

/* Is fd one of this process's own records' files?  An inherited number
 * the app closed may have been handed to one of them since. */
static bool fd_of_own_record(int fd)
{
	for (struct sdp_dev *d = dev_list; d; d = d->next)
		if (fd == d->ctx_cmd_fd || fd == d->ctx_async_fd ||
		    (d->cc && fd == d->cc->fd) || (d->link_cc && fd == d->link_cc->fd))
			return true;
	return false;
}

static void release_inherited_fd(int fd, const char *prefix, const char *what)
{
	if (fd >= 0 && !fd_of_own_record(fd) && fd_is(fd, prefix))
		fd_release_in_place(fd, what);
}

/* A forked child holds its ancestors' files of every device they used:
 * their records' contexts and completion channels, useless here (core/qp.h).
 * Those of a device that left the list are released in place.  Not by
 * d->retired, which is the parent's word: a fork between its retire and its
 * release (up to 5 s) would leave the child's copies alone. */
static void release_inherited_of_gone(struct ibv_device **list)
{
	static const char event_file[] = "anon_inode:[infinibandevent]";

	for (unsigned g = 0; g < inherited_count; g++) {
		for (struct sdp_dev *d = inherited[g]; d; d = d->next) {
			if (d->inherited_released || in_list(list, d->device))
				continue;
			d->inherited_released = true; /* in this process's copy only */
			release_inherited_fd(d->cc->fd, event_file, "inherited completion channel");
			release_inherited_fd(d->link_cc->fd, event_file, "inherited completion channel");
			release_inherited_fd(d->ctx_cmd_fd, "/dev/infiniband/uverbs", "inherited context");
			release_inherited_fd(d->ctx_async_fd, event_file, "inherited context's events");
			sdp_info("device %s removed: released what this process inherited of it",
				 d->name);
		}
	}
}

void dev_check_listed(void)
{
	struct ibv_device **list = devices_listed();
	struct sdp_dev *gone[16];
	int n = 0;

	if (!list)
		return; /* cannot tell: nothing is judged gone */
	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d && n < 16; d = d->next)
		if (!d->retired && !atomic_load(&d->removed) && !in_list(list, d->device))
			gone[n++] = d;
	release_inherited_of_gone(list);
	pthread_mutex_unlock(&dev_lock);
	devices_listed_free(list);
	for (int i = 0; i < n; i++)
		mark_removed(gone[i]);
}

void dev_conn_gone(struct sdp_dev *dev)
{
	if (atomic_fetch_sub(&dev->conns, 1) != 1)
		return;
	mrcache_flush_dev(dev);
	if (atomic_load(&dev->removed))
		retire_when_unused(dev);
}

int dev_snapshot(struct sdp_dev **out, int max)
{
	int n = 0;

	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d && n < max; d = d->next)
		if (!d->retired)
			out[n++] = d;
	pthread_mutex_unlock(&dev_lock);
	return n;
}

unsigned dev_generation(void)
{
	return atomic_load(&dev_gen);
}

/* EPOLLEXCLUSIVE wakes the queue's entries in order until one has a
 * sleeper: a watch re-added goes to the tail.  An event between the two
 * calls is not lost: the add polls the channel. */
void dev_progress_watch_last(void)
{
	pthread_mutex_lock(&dev_lock);
	for (struct sdp_dev *d = dev_list; d; d = d->next) {
		if (d->retired)
			continue;
		progress_unwatch(d->link_cc->fd);
		if (progress_watch(d->link_cc->fd, EPOLLIN | EPOLLEXCLUSIVE, &d->link_cc_src) != 0)
			sdp_error("device %s: the progress thread cannot watch its completions: %s",
				  d->name, strerror(errno));
	}
	pthread_mutex_unlock(&dev_lock);
}

void dev_atfork_child(int parent_cm_fd)
{
	pthread_mutex_init(&dev_lock, NULL);
	if (dev_list && inherited_count < INHERITED_GENERATIONS)
		inherited[inherited_count++] = dev_list;
	if (parent_cm_fd >= 0 && inherited_cm_count < INHERITED_GENERATIONS)
		inherited_cm_fds[inherited_cm_count++] = parent_cm_fd;
	dev_list = NULL; /* the parent's contexts: kept for their release only */
	contexts_inherited |= parent_cm_fd >= 0; /* a grandchild inherits them too */
	dev_watch_atfork_child();
	memset(&release_timer, 0, sizeof(release_timer));
}

/* The verbs-file mappings a forked child inherited (the parent's queues),
 * read at the end of its fork handling; known: all of them fitted. */
#define INHERITED_MAPS_MAX 256
static struct { unsigned long start, end; } inherited_maps[INHERITED_MAPS_MAX];
static unsigned inherited_maps_n;
static bool inherited_maps_known;

typedef void verbs_mapping_fn(unsigned long start, unsigned long end, bool deleted, void *ctx);

/* Each whole line of /proc/self/maps that maps a verbs file. */
static void each_verbs_mapping(verbs_mapping_fn *fn, void *ctx)
{
	static const char prefix[] = "/dev/infiniband/uverbs", gone[] = " (deleted)";
	char line[512];
	bool at_line_start = true;
	FILE *maps = fopen("/proc/self/maps", "re");

	if (!maps)
		return;
	while (fgets(line, sizeof(line), maps)) {
		size_t len = strlen(line);
		bool whole = at_line_start && len && line[len - 1] == '\n';
		unsigned long start, end;
		int path_at = -1;

		at_line_start = len && line[len - 1] == '\n'; /* a longer line's tail is skipped */
		if (!whole)
			continue;
		line[--len] = '\0';
		if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &start, &end, &path_at) != 2 ||
		    path_at < 0 || strncmp(line + path_at, prefix, sizeof(prefix) - 1) != 0 ||
		    end <= start)
			continue;
		fn(start, end, len >= sizeof(gone) - 1 && strcmp(line + len - (sizeof(gone) - 1), gone) == 0,
		   ctx);
	}
	fclose(maps);
}

static void note_inherited_mapping(unsigned long start, unsigned long end, bool deleted, void *ctx)
{
	(void)deleted;
	(void)ctx;
	if (inherited_maps_n == INHERITED_MAPS_MAX) {
		inherited_maps_known = false;
		return;
	}
	inherited_maps[inherited_maps_n].start = start;
	inherited_maps[inherited_maps_n++].end = end;
}

static bool mapping_inherited(unsigned long start, unsigned long end)
{
	for (unsigned i = 0; i < inherited_maps_n; i++)
		if (start >= inherited_maps[i].start && end <= inherited_maps[i].end)
			return true;
	return false;
}

static void cover_if_inherited(unsigned long start, unsigned long end, bool deleted, void *ctx)
{
	(void)ctx;
	if (!deleted)
		return;
	/* With a record of its own (a child that made its own connections), only
	 * what it inherited: its own queues may be among the rest. */
	if (dev_list && !(inherited_maps_known && mapping_inherited(start, end)))
		return;
	if (mmap((void *)start, end - start, PROT_NONE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0) == MAP_FAILED)
		sdp_warn("cannot let go of an inherited mapping of a removed device: %s",
			 strerror(errno));
}

/* The mappings of a removed device's verbs file that this process holds
 * (the queues of the parent's QPs and CQs, which a provider such as rxe
 * maps from it): a mapping holds the file, as an fd does.  With no record
 * of its own, all of them; with one (a child that climbed, or connected),
 * those it inherited at the fork.  Each range gets inaccessible anonymous
 * memory in place (MAP_FIXED), not a hole: whoever unmaps it later (a
 * provider closing a context) unmaps nothing of ours. */
static void cover_inherited_queues(void)
{
	each_verbs_mapping(cover_if_inherited, NULL);
}

void dev_after_fork_child(void)
{
	inherited_maps_n = 0;
	inherited_maps_known = false;
	if (!(inherited_count || inherited_cm_count) || !sdp_tun.child_device_watch)
		return;
	inherited_maps_known = true;
	each_verbs_mapping(note_inherited_mapping, NULL);
	dev_watch_inherited_start();
}

void dev_release_inherited_gone(void)
{
	struct ibv_device **list = devices_listed();

	if (!list)
		return; /* cannot tell: nothing is judged gone */
	pthread_mutex_lock(&dev_lock);
	release_inherited_of_gone(list);
	/* A device went: the ancestors' rdma_cm files go too (their ids on
	 * it hold it; this process never uses them, whatever the device). */
	for (unsigned g = 0; g < inherited_cm_count; g++)
		if (fd_is(inherited_cm_fds[g], "/dev/infiniband/rdma_cm"))
			fd_release_in_place(inherited_cm_fds[g], "inherited rdma_cm channel");
	inherited_cm_count = 0;
	cover_inherited_queues();
	pthread_mutex_unlock(&dev_lock);
	devices_listed_free(list);
}
