/*
 * A Python FnCall's own process, from the fork to its code (native/fn-zygote.py): its namespaces
 * and root, its files, its working directory and descriptors, in C. The zygote's Python then only
 * sets the environment and runs the code: every line of Python a call runs before its code writes
 * (and so copies) pages it shares with the zygote, and this part cost about a hundred of them.
 *
 * Built into libwarren-fn.so only, with the same rule as fn.c (libc calls every glibc has had
 * since 2.2.5: no stat family).
 */
#define _GNU_SOURCE
#include "fn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/syscall.h>
#include <unistd.h>

/* An error before the call's code runs, on its error pipe (int errno, the message, NUL), then
 * the end of the call, as warren-init's children report theirs. */
static void __attribute__((noreturn, format(printf, 3, 4))) fail(int ep, int err, const char *fmt, ...)
{
	char b[480];
	memcpy(b, &err, sizeof err);
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(b + sizeof err, sizeof b - sizeof err, fmt, ap);
	va_end(ap);
	size_t len = sizeof err + (n < 0 ? 0 : (size_t)n >= sizeof b - sizeof err ? sizeof b - sizeof err - 1 : (size_t)n) + 1;
	for (const char *p = b; len;) {
		ssize_t w = write(ep, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		p += w;
		len -= (size_t)w;
	}
	_exit(127);
}

/* A field's value as a C string (malloc'd; NULL for one with a NUL byte in it, or no memory). */
static char *cstr(const char *v, size_t n)
{
	if (memchr(v, 0, n))
		return NULL;
	char *s = malloc(n + 1);
	if (s) {
		memcpy(s, v, n);
		s[n] = 0;
	}
	return s;
}

/* mkdir -p with mode 0755 (what is there already, a directory or a link to one, is kept). 0 or errno. */
static int mkdir_p(char *path)
{
	for (char *p = path + 1;; p++) {
		if (*p != '/' && *p)
			continue;
		char c = *p;
		*p = 0;
		int e = 0;
		if (mkdir(path, 0755) < 0) {
			/* There already: a directory (or a link to one) is opened as one (no stat: see the top). */
			int fd = errno == EEXIST ? open(path, O_PATH | O_DIRECTORY | O_CLOEXEC) : -1;
			if (fd >= 0)
				close(fd);
			else
				e = errno == EEXIST || errno == ENOTDIR ? (c ? ENOTDIR : EEXIST) : errno;
		}
		*p = c;
		if (e)
			return e;
		if (!c)
			return 0;
	}
}

/* The request's next field from offset *i (a key byte, a little-endian u32 length, the value; a
 * value cut off by the end is taken as far as it goes, as the zygote's Python took it): 0 at the end. */
static int next_field(const char *d, size_t n, size_t *i, char *k, const char **v, size_t *vn)
{
	if (*i + 5 > n)
		return 0;
	uint32_t len;
	*k = d[*i];
	memcpy(&len, d + *i + 1, sizeof len);
	*vn = len > n - *i - 5 ? n - *i - 5 : len;
	*v = d + *i + 5;
	*i += 5 + *vn;
	return 1;
}

/* The request's files (a `P` path, then a `B` field with the bytes, repeated), written in the
 * call's own root; a file that cannot be written ends the call. */
static void write_files(int ep, const char *d, size_t n)
{
	char *path = NULL;
	char k;
	const char *v;
	size_t vn;
	for (size_t i = 0; next_field(d, n, &i, &k, &v, &vn);) {
		if (k == 'P') {
			free(path);
			path = cstr(v, vn);
			if (!path)
				fail(ep, EINVAL, "files: a path with a NUL byte");
			continue;
		}
		if (k != 'B' || !path)
			continue;
		char *slash = strrchr(path, '/');
		if (slash && slash != path) {
			*slash = 0;
			int e = mkdir_p(path);
			*slash = '/';
			if (e)
				fail(ep, e, "files: %s: %s", path, strerror(e));
		}
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (fd < 0)
			fail(ep, errno, "files: %s: %s", path, strerror(errno));
		for (size_t off = 0; off < vn;) {
			ssize_t w = write(fd, v + off, vn - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				fail(ep, errno, "files: %s: %s", path, strerror(errno));
			off += (size_t)w;
		}
		close(fd);
		free(path);
		path = NULL;
	}
	free(path);
}

int warren_fn_prepare(const int *fds, unsigned long tmpfs_kib, struct warren_fn_call *out)
{
	int ep = fds[4];
	if (warren_fn_isolate(tmpfs_kib, 0) < 0)
		fail(ep, errno ? errno : EIO, "isolate: %s", warren_fn_error());
	off_t size = lseek(fds[0], 0, SEEK_END);
	if (size < 0)
		fail(ep, errno, "request: %s", strerror(errno));
	size_t n = (size_t)size;
	char *d = malloc(n ? n : 1);
	if (!d)
		fail(ep, ENOMEM, "request: %s", strerror(ENOMEM));
	for (size_t off = 0; off < n;) {
		ssize_t r = pread(fds[0], d + off, n - off, (off_t)off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			fail(ep, r < 0 ? errno : EIO, "request: %s", r < 0 ? strerror(errno) : "cut off");
		off += (size_t)r;
	}
	write_files(ep, d, n);
	/* The code (its `C` fields, in order), the environment (`e`, NUL between entries) and the
	 * working directory (the last `c`; /tmp without one), gathered in place. */
	char *code = malloc(n ? n : 1), *env = malloc(n ? n : 1), *cwd = NULL;
	if (!code || !env)
		fail(ep, ENOMEM, "request: %s", strerror(ENOMEM));
	size_t ncode = 0, nenv = 0, count = 0;
	char k;
	const char *v;
	size_t vn;
	for (size_t i = 0; next_field(d, n, &i, &k, &v, &vn);) {
		if (k == 'C') {
			memcpy(code + ncode, v, vn);
			ncode += vn;
		} else if (k == 'e') {
			if (memchr(v, 0, vn))
				fail(ep, EINVAL, "env: a NUL byte in a variable");
			if (count++)
				env[nenv++] = 0;
			memcpy(env + nenv, v, vn);
			nenv += vn;
		} else if (k == 'c') {
			free(cwd);
			cwd = cstr(v, vn);
			if (!cwd)
				fail(ep, EINVAL, "cwd: a path with a NUL byte");
		}
	}
	if (!cwd)
		cwd = strdup("/tmp");
	if (!cwd)
		fail(ep, ENOMEM, "cwd: %s", strerror(ENOMEM));
	int e = *cwd ? mkdir_p(cwd) : ENOENT;
	if (e || chdir(cwd) < 0)
		fail(ep, e ? e : errno, "cwd: %s: %s", cwd, strerror(e ? e : errno));
	if (dup2(fds[1], 0) < 0 || dup2(fds[2], 1) < 0 || dup2(fds[3], 2) < 0)
		fail(ep, errno, "dup2: %s", strerror(errno));
	/* Everything else goes: the error pipe (its end tells the init the code runs), the socket,
	 * and other calls' status pipes. A sandbox's descriptors stay below 4096. */
	if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0)
		for (int fd = 3; fd < 4096; fd++)
			close(fd);
	setsid();
	umask(022);
	free(d);
	free(cwd);
	out->code = code;
	out->ncode = ncode;
	out->env = env;
	out->nenv = nenv;
	out->count = count;
	return 0;
}
