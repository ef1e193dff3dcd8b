/* warren-init: byte buffers, the clock, allocation that cannot fail, little-endian words. */
#include "init.h"

int64_t now_ms;

struct rlimit saved_nofile;

int64_t mono(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void *xrealloc(void *p, size_t n)
{
	void *q = realloc(p, n ? n : 1);
	if (!q) {
		static const char m[] = "warren-init: out of memory\n";
		if (write(2, m, sizeof m - 1) < 0) {
		}
		_exit(1);
	}
	return q;
}

char *xstrndup(const char *s, size_t n)
{
	char *r = xrealloc(NULL, n + 1);
	memcpy(r, s, n);
	r[n] = 0;
	return r;
}

void put32(char *p, uint32_t v)
{
	p[0] = (char)(v & 0xff);
	p[1] = (char)((v >> 8) & 0xff);
	p[2] = (char)((v >> 16) & 0xff);
	p[3] = (char)((v >> 24) & 0xff);
}

uint32_t get32(const char *p)
{
	const unsigned char *u = (const unsigned char *)p;
	return (uint32_t)u[0] | ((uint32_t)u[1] << 8) | ((uint32_t)u[2] << 16) |
	       ((uint32_t)u[3] << 24);
}

size_t bused(const buf_t *b) { return b->len - b->off; }

void breserve(buf_t *b, size_t extra)
{
	if (b->off && b->off == b->len)
		b->off = b->len = 0;
	if (b->cap - b->len >= extra)
		return;
	if (b->off) {
		memmove(b->d, b->d + b->off, b->len - b->off);
		b->len -= b->off;
		b->off = 0;
		if (b->cap - b->len >= extra)
			return;
	}
	/* small buffers double; large ones grow to what is needed (keeps RSS tight) */
	size_t need = b->len + extra, nc = b->cap ? b->cap : 4096;
	if (need > 65536)
		nc = (need + 16383) & ~(size_t)16383;
	else
		while (nc < need)
			nc *= 2;
	b->d = xrealloc(b->d, nc);
	b->cap = nc;
}

void bappend(buf_t *b, const void *p, size_t n)
{
	if (!n)
		return;
	breserve(b, n);
	memcpy(b->d + b->len, p, n);
	b->len += n;
}

void bfree(buf_t *b)
{
	free(b->d);
	b->d = NULL;
	b->off = b->len = b->cap = 0;
}

void bconsume(buf_t *b, size_t n)
{
	b->off += n;
	if (b->off >= b->len) {
		b->off = b->len = 0;
		if (b->cap > 65536)
			bfree(b);
	}
}

/*
 * Writes what b holds into a non-blocking pipe (a command's stdin, a session's shell) until b is
 * empty (0) or the pipe is full (1); -1: the pipe broke, for the caller to close.
 */
int pipe_drain(int fd, buf_t *b)
{
	while (bused(b)) {
		ssize_t n = write(fd, b->d + b->off, bused(b));
		if (n > 0) {
			bconsume(b, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 && errno == EAGAIN ? 1 : -1;
	}
	return 0;
}

void set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0)
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}
