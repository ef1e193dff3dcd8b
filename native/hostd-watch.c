/*
 * warren-hostd: processes watched until they end, so the edge hears of a sandbox's init ending
 * instead of reading /proc/PID/stat of every sandbox every few seconds (at 10,000 sandboxes that
 * poll was a quarter of a core at rest).
 *
 *   TAG watch PID STARTTIME   watch the process PID whose start time (field 22 of
 *                             /proc/PID/stat, clock ticks after boot) is STARTTIME
 *
 * The reply is "TAG ok"; when the process ends (now, if it already has or the pid is another
 * process's by now) an event line "* exit PID STARTTIME" follows. A watch lasts until its
 * process ends. This helper's own children (the inits it spawned) are told of when they are
 * reaped (watch_reaped); any other process (an init adopted after a restart) through a pidfd in
 * an epoll set, one fd in the main poll. Not a pidfd for every init: every fork of this helper
 * copies its file table and every child's exit closes it, and at 2,500 sandboxes that was 7 %
 * of the machine's CPU.
 */
#include "hostd.h"
#include <sys/epoll.h>
#include <sys/syscall.h>

static int epfd = -1;

int watch_fd(void)
{
	if (epfd < 0)
		epfd = epoll_create1(EPOLL_CLOEXEC);
	return epfd;
}

static void report(pid_t pid, unsigned long long start)
{
	printf("*\texit\t%d\t%llu\n", pid, start);
}

unsigned long long proc_start_time(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof path, "/proc/%d/stat", pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* The command name may hold spaces and parentheses: fields resume after the last ')'. */
	char *p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X')
		return 0;
	p += 2;
	for (int i = 0; i < 19; i++) {
		p = strchr(p, ' ');
		if (!p)
			return 0;
		p++;
	}
	return strtoull(p, NULL, 10);
}

/* What each watching pidfd (by fd number) watches: its pid and start time, echoed in the event. */
struct watch {
	pid_t pid;
	unsigned long long start;
};
static struct watch *watches;
static size_t nwatches;

static int remember(int pfd, pid_t pid, unsigned long long start)
{
	if ((size_t)pfd >= nwatches) {
		size_t n = nwatches ? nwatches : 1024;
		while (n <= (size_t)pfd)
			n *= 2;
		struct watch *w = realloc(watches, n * sizeof *w);
		if (!w)
			return -1;
		memset(w + nwatches, 0, (n - nwatches) * sizeof *w);
		watches = w;
		nwatches = n;
	}
	watches[pfd] = (struct watch){ pid, start };
	return 0;
}

/* Watched children of this helper, told of at their reaping. */
static struct watch *kids;
static size_t nkids, capkids;

static int remember_kid(pid_t pid, unsigned long long start)
{
	if (nkids == capkids) {
		size_t n = capkids ? capkids * 2 : 1024;
		struct watch *w = realloc(kids, n * sizeof *w);
		if (!w)
			return -1;
		kids = w;
		capkids = n;
	}
	kids[nkids++] = (struct watch){ pid, start };
	return 0;
}

void watch_reaped(pid_t pid)
{
	for (size_t i = 0; i < nkids; i++) {
		if (kids[i].pid != pid)
			continue;
		report(pid, kids[i].start);
		kids[i] = kids[--nkids];
		return;
	}
}

/* 1: pid is a child of this helper and runs; 0: a child that ended (not reaped yet); -1: no child. */
static int child_state(pid_t pid)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0)
		return -1;
	return si.si_pid == 0;
}

void do_watch(const char *tag, char **f)
{
	char *end1, *end2;
	long pid = strtol(f[0], &end1, 10);
	unsigned long long start = strtoull(f[1], &end2, 10);
	if (*end1 || *end2 || pid <= 0 || pid > INT_MAX || !*f[1] || watch_fd() < 0) {
		reply_err(tag, EINVAL, "watch");
		return;
	}
	/* A child keeps its pid until reaped: one that runs with that start time is the one asked about. */
	int kid = child_state((pid_t)pid);
	if (kid == 1 && proc_start_time((pid_t)pid) == start && remember_kid((pid_t)pid, start) == 0) {
		reply_ok(tag);
		return;
	}
	if (kid >= 0) {
		reply_ok(tag);
		report((pid_t)pid, start);
		return;
	}
	int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	/* Opened first, then the start time checked: a pidfd names the process the pid was at the
	 * open, so a matching start time proves it is the one asked about. */
	if (pfd < 0 || proc_start_time((pid_t)pid) != start) {
		if (pfd >= 0)
			close(pfd);
		reply_ok(tag);
		report((pid_t)pid, start);
		return;
	}
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = pfd };
	if (remember(pfd, (pid_t)pid, start) < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, pfd, &ev) < 0) {
		/* Out of fds or memory: the edge keeps looking at this one itself. */
		int e = errno;
		close(pfd);
		reply_err(tag, e, "watch");
		return;
	}
	reply_ok(tag);
}

void watch_ready(void)
{
	struct epoll_event ev[256];
	int n;
	while ((n = epoll_wait(epfd, ev, 256, 0)) > 0) {
		for (int i = 0; i < n; i++) {
			int pfd = ev[i].data.fd;
			/* An init that is this helper's child is reaped now (no walk of all children);
			 * one that is not (adopted after a restart) answers ECHILD. */
			siginfo_t si;
			waitid(P_PIDFD, (id_t)pfd, &si, WEXITED | WNOHANG);
			report(watches[pfd].pid, watches[pfd].start);
			epoll_ctl(epfd, EPOLL_CTL_DEL, pfd, NULL);
			close(pfd);
		}
		if (n < 256)
			break;
	}
}
