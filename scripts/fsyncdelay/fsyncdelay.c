/*
 * fsyncdelay: an LD_PRELOAD shim that makes every fsync(2) and fdatasync(2)
 * of the process take RESERVOIR_FSYNC_DELAY_NS nanoseconds longer, after
 * the real call returns. scripts/services starts mariadbd under it when
 * RESERVOIR_MYSQL_FSYNC_DELAY is set, so that a commit costs what it costs
 * on a network block volume (a cloud disk's synchronous write takes about a
 * millisecond; this machine's local disk takes microseconds). Nothing else
 * changes: the data is written and synced as before, only later answered.
 *
 * Built from this file at start with the machine's C compiler:
 *   cc -shared -fPIC -O2 -o fsyncdelay.so fsyncdelay.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>
#include <time.h>

static long delay_ns(void) {
	static long ns = -1; /* read once; a benign race writes the same value */
	if (ns < 0) {
		const char *s = getenv("RESERVOIR_FSYNC_DELAY_NS");
		ns = s ? atol(s) : 0;
	}
	return ns;
}

static void wait_delay(void) {
	long ns = delay_ns();
	if (ns <= 0)
		return;
	int saved = errno; /* the caller reads errno of the real call */
	struct timespec ts = {ns / 1000000000L, ns % 1000000000L};
	while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
		;
	errno = saved;
}

int fsync(int fd) {
	static int (*real)(int);
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	int r = real(fd);
	wait_delay();
	return r;
}

int fdatasync(int fd) {
	static int (*real)(int);
	if (!real)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	int r = real(fd);
	wait_delay();
	return r;
}
