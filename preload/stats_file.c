/* The SDPSHIM_STATS_FILE writer: one JSON line per connection, appended when
 * it closes.  The file is opened and checked once, then kept open (hidden,
 * close-on-exec) while its name still names it. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fdtable.h"
#include "base/log.h"
#include "core/progress.h" /* progress_hide_fd(), progress_close_hidden() */
#include "ipoib_fallback/path.h" /* path_progname() */
#include "preload/stats_file.h"

/* The open file, the name it was opened under (the variable may change) and
 * its identity (an app that closes our descriptor behind the hooks, with a
 * raw close_range, may get the number back for a file of its own). */
static struct {
	pthread_mutex_t lock;
	int fd;
	char *name;
	dev_t dev;
	ino_t ino;
} out = { PTHREAD_MUTEX_INITIALIZER, -1, NULL, 0, 0 };

/* The stats file is shared by every process of a run, so it cannot be
 * created exclusively; it must be ours (or root's, who could read our lines
 * anyway), a regular file with one link.  A file another user planted in a
 * shared directory such as /tmp would otherwise collect our connections. */
static bool file_trusted(int fd, const char *file, struct stat *st)
{
	static _Atomic int warned;

	if (fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_nlink == 1 &&
	    (st->st_uid == geteuid() || st->st_uid == 0))
		return true;
	if (!warned++)
		sdp_warn("SDPSHIM_STATS_FILE %s is not a regular file of this user (or root) with "
			 "one link; no stats lines are written to it", file);
	return false;
}

/* Opens and checks file (*st: what it is); -1 (with one warning) if it
 * will not do. */
static int open_checked(const char *file, struct stat *st)
{
	/* Never through a symbolic link: one planted where the file would be
	 * created would make us append to (or create) a file of its choosing. */
	int fd = (int)syscall(SYS_openat, AT_FDCWD, file,
			      O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);

	if (fd < 0) {
		static _Atomic int warned;
		int err = errno;

		if (!warned++) {
			if (err == ELOOP)
				sdp_warn("SDPSHIM_STATS_FILE %s is a symbolic link; no stats lines "
					 "are written through it", file);
			else
				sdp_warn("cannot open SDPSHIM_STATS_FILE %s: %s", file, strerror(err));
		}
		return -1;
	}
	if (!file_trusted(fd, file, st)) {
		syscall(SYS_close, fd);
		return -1;
	}
	return progress_hide_fd(fd);
}

/* Lets go of the kept file; its descriptor is closed only if it is still
 * ours (close_it). */
static void forget_locked(bool close_it)
{
	if (out.fd >= 0 && close_it)
		progress_close_hidden(out.fd);
	else if (out.fd >= 0)
		fdt_clear(out.fd);
	out.fd = -1;
	free(out.name);
	out.name = NULL;
}

/* The kept descriptor for file, or -1 after letting go of it: it must
 * still be the file we opened, and file must still name it with one link
 * (a removed, rotated or renamed-over file is opened again, as a fresh run
 * expects).  Two stats, against an open, a check and a close each line. */
static int kept_fd_locked(const char *file)
{
	struct stat st;

	if (out.fd < 0)
		return -1;
	if (fstat(out.fd, &st) != 0 || st.st_dev != out.dev || st.st_ino != out.ino) {
		forget_locked(false); /* the number is not ours any more */
		return -1;
	}
	if (!out.name || strcmp(out.name, file) != 0 ||
	    fstatat(AT_FDCWD, file, &st, AT_SYMLINK_NOFOLLOW) != 0 || st.st_dev != out.dev ||
	    st.st_ino != out.ino || st.st_nlink != 1) {
		forget_locked(true);
		return -1;
	}
	return out.fd;
}

static int file_fd_locked(const char *file)
{
	struct stat st;

	if (kept_fd_locked(file) >= 0)
		return out.fd;
	out.fd = open_checked(file, &st);
	if (out.fd < 0)
		return -1;
	out.name = strdup(file);
	if (!out.name) {
		forget_locked(true);
		return -1;
	}
	out.dev = st.st_dev;
	out.ino = st.st_ino;
	return out.fd;
}

void stats_file_append(const struct sdp_conn_stats *st, pid_t pid, uint64_t closed_ms)
{
	const char *file = getenv("SDPSHIM_STATS_FILE");
	char line[2048];
	int len, fd;

	if (!file || !*file)
		return;
	len = stats_conn_json(st, pid, path_progname(), closed_ms, line, sizeof(line) - 1);
	if (len < 0)
		return;
	line[len++] = '\n';
	pthread_mutex_lock(&out.lock);
	fd = file_fd_locked(file);
	/* One write with O_APPEND: lines from many processes never interleave. */
	if (fd >= 0)
		syscall(SYS_write, fd, line, (size_t)len);
	pthread_mutex_unlock(&out.lock);
}

void stats_file_atfork_prepare(void)
{
	pthread_mutex_lock(&out.lock);
}

void stats_file_atfork_parent(void)
{
	pthread_mutex_unlock(&out.lock);
}

void stats_file_atfork_child(void)
{
	pthread_mutex_init(&out.lock, NULL);
}
