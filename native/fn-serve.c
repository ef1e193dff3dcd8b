/*
 * The Python zygote's loop (native/fn-zygote.py), in C: take a call from the init, fork it, tell
 * the init its pid and, at its end, its wait status. The zygote's own Python never runs again once
 * it is here, so a fork leaves it nothing to write: a loop in Python wrote (and so copied) about
 * 60 pages of the memory it shares with the calls it forked, per call.
 *
 * Per call the init sends one byte with six descriptors: the request, stdin, stdout, stderr, the
 * error pipe and the status pipe (native/init/fncall.c). The zygote writes "p<pid>\n" to the status
 * pipe after the fork and "s<wait status>\n" when the call is over; a call that cannot be forked
 * gets an error on its error pipe (an int errno, then a message) as warren-init's children do.
 *
 * Built into libwarren-fn.so only, with the same rule as fn.c: libc calls every glibc has had
 * since 2.2.5, so it loads into an image's Python whatever its glibc. Python's own fork steps are
 * passed in by the zygote (ctypes.pythonapi), so nothing here links against a libpython.
 */
#define _GNU_SOURCE
#include "fn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NFD 6

struct call {
	pid_t pid;
	int status_fd;
};

static int wake[2] = { -1, -1 };

static void on_child(int sig)
{
	(void)sig;
	int e = errno;
	char b = 0;
	if (write(wake[1], &b, 1) < 0) {
		/* Full: a wake-up is already pending. */
	}
	errno = e;
}

static void write_all(int fd, const char *s, size_t n)
{
	while (n) {
		ssize_t w = write(fd, s, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return;
		s += w;
		n -= (size_t)w;
	}
}

/* An error before the call's code runs, on its error pipe: int errno, the message, NUL. */
static void report(int ep, int err, const char *what, const char *detail)
{
	char b[512];
	memcpy(b, &err, sizeof err);
	int n = snprintf(b + sizeof err, sizeof b - sizeof err, "%s: %s", what, detail);
	size_t len = sizeof err + (n < 0 ? 0 : (size_t)n >= sizeof b - sizeof err ? sizeof b - sizeof err - 1 : (size_t)n) + 1;
	write_all(ep, b, len);
}

/* One message from the init: 1 with the call's six descriptors, 0 when the init is gone, -1 for
 * nothing to take now (or a message without six descriptors, whose descriptors are closed). */
static int take(int sock, int *fds)
{
	char b;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * NFD)];
		struct cmsghdr align;
	} u;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf };
	ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT);
	/* Only the init's end (EOF, or a reset) ends the zygote; a passing error (no memory) does not. */
	if (r < 0)
		return errno == ECONNRESET || errno == ENOTCONN || errno == EBADF || errno == ENOTSOCK ? 0 : -1;
	if (r == 0)
		return 0;
	int n = 0;
	for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
			if (n < NFD)
				fds[n++] = fd;
			else
				close(fd);
		}
	}
	if (n == NFD && !(mh.msg_flags & MSG_CTRUNC))
		return 1;
	for (int i = 0; i < n; i++)
		close(fds[i]);
	return -1;
}

int warren_fn_serve(int sock, int *fds, void (*const *py_fork)(void))
{
	void (*before)(void) = py_fork[0], (*parent)(void) = py_fork[1], (*child)(void) = py_fork[2];
	struct call *calls = NULL;
	size_t ncalls = 0, cap = 0;
	if (pipe(wake) < 0)
		return -1;
	for (int i = 0; i < 2; i++) {
		fcntl(wake[i], F_SETFD, FD_CLOEXEC);
		fcntl(wake[i], F_SETFL, O_NONBLOCK);
	}
	struct sigaction sa, old;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_child;
	sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCHLD, &sa, &old) < 0)
		return -1;
	for (;;) {
		struct pollfd p[2] = { { .fd = sock, .events = POLLIN }, { .fd = wake[0], .events = POLLIN } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return -1;
		if (p[1].revents) {
			char drain[64];
			while (read(wake[0], drain, sizeof drain) > 0) {
			}
		}
		/* Reap first: a pid the kernel hands out again is then a new call's, never an old one's. */
		for (;;) {
			int st;
			pid_t pid = waitpid(-1, &st, WNOHANG);
			if (pid <= 0)
				break;
			for (size_t i = 0; i < ncalls; i++)
				if (calls[i].pid == pid) {
					char m[32];
					int n = snprintf(m, sizeof m, "s%d\n", st);
					write_all(calls[i].status_fd, m, (size_t)n);
					close(calls[i].status_fd);
					calls[i] = calls[--ncalls];
					break;
				}
		}
		if (p[0].revents & POLLNVAL)
			return -1;
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		int t = take(sock, fds);
		if (t == 0)
			return 0;
		if (t < 0)
			continue;
		if (ncalls == cap) {
			size_t ncap = cap ? cap * 2 : 16;
			struct call *nc = realloc(calls, ncap * sizeof *nc);
			if (!nc) {
				report(fds[4], ENOMEM, "fork", strerror(ENOMEM));
				for (int i = 0; i < NFD; i++)
					close(fds[i]);
				continue;
			}
			calls = nc;
			cap = ncap;
		}
		if (warren_fn_next_pid_ns() < 0) {
			report(fds[4], errno ? errno : EIO, "isolate", warren_fn_error());
			for (int i = 0; i < NFD; i++)
				close(fds[i]);
			continue;
		}
		/* Python's own steps around a fork, as os.fork() takes them. */
		before();
		pid_t pid = fork();
		int e = errno;
		if (pid == 0) {
			child();
			sigaction(SIGCHLD, &old, NULL);
			close(wake[0]);
			close(wake[1]);
			free(calls);
			return 1;
		}
		parent();
		if (pid < 0) {
			report(fds[4], e, "fork", strerror(e));
			close(fds[5]);
		} else {
			char m[32];
			int n = snprintf(m, sizeof m, "p%d\n", (int)pid);
			write_all(fds[5], m, (size_t)n);
			calls[ncalls++] = (struct call){ pid, fds[5] };
		}
		for (int i = 0; i < NFD - 1; i++)
			close(fds[i]);
	}
}
