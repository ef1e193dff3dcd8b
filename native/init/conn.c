/* warren-init: connections from the edge: reading frames, sending them with backpressure, ending and failing calls. */
#include "init.h"

struct conn *conns;

struct cmd *cmds;

struct sess *sesss;

struct xop *xops;

int next_sess_id;

int64_t trim_at; /* give freed heap memory back to the kernel at this time */

char rbuf[CHUNK];

int clive(const struct conn *c) { return c && !c->gone; }

int cbp(const struct conn *c) { return clive(c) && bused(&c->out) >= HIGH_WATER; }

/* How much to read for the next output chunk so the buffer stays near HIGH_WATER. */
size_t chunk_room(const struct conn *c)
{
	size_t u = bused(&c->out), lim = HIGH_WATER + 16384;
	size_t r = u < lim ? lim - u : 0;
	if (r < 16384)
		r = 16384;
	return r > CHUNK ? CHUNK : r;
}

void conn_flush(struct conn *c)
{
	if (c->gone)
		return;
	while (bused(&c->out)) {
		ssize_t n = send(c->fd, c->out.d + c->out.off, bused(&c->out), MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			bconsume(&c->out, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		c->gone = 1;
		return;
	}
	if (c->state == CS_REQ && c->reuse)
		bfree(&c->out);
	if (c->state == CS_FINAL) {
		if (c->rd_eof) {
			c->gone = 1;
			return;
		}
		shutdown(c->fd, SHUT_WR);
		c->state = CS_LINGER;
		c->linger_until = now_ms + LINGER_MS;
	}
}

/* Adds a frame to what the connection sends, without sending yet. */
static void conn_queue(struct conn *c, char t, const void *p, size_t n)
{
	char h[5];
	put32(h, (uint32_t)n + 1);
	h[4] = t;
	bappend(&c->out, h, 5);
	bappend(&c->out, p, n);
}

void conn_send(struct conn *c, char t, const void *p, size_t n)
{
	if (!clive(c))
		return;
	conn_queue(c, t, p, n);
	conn_flush(c);
}

/* Send the frame that ends the operation and release op resources. */
void conn_final(struct conn *c, char t, const void *p, size_t n)
{
	if (!c)
		return;
	if (c->cmd) {
		if (c->cmd->conn == c)
			c->cmd->conn = NULL;
		c->cmd = NULL;
	}
	if (c->sess) {
		if (c->sess->conn == c)
			c->sess->conn = NULL;
		c->sess = NULL;
	}
	if (c->xop) {
		c->xop->conn = NULL;
		c->xop = NULL;
	}
	if (c->ffd >= 0) {
		close(c->ffd);
		c->ffd = -1;
	}
	if (c->ls) {
		lst_free(c->ls);
		c->ls = NULL;
	}
	if (c->state != CS_OP)
		return;
	/* A kept connection takes the next request once this operation's last frame is out. */
	if (c->reuse && c->op != REQ_NEW_SESSION) {
		c->state = CS_REQ;
		c->op = 0;
		/* One write: the edge reads the end and the ready together, so the connection is kept
		 * before the caller's next call can come (two writes lost that race under load, and the
		 * next call connected anew). */
		if (clive(c)) {
			conn_queue(c, t, p, n);
			conn_queue(c, REPLY_READY, NULL, 0);
			conn_flush(c);
		}
		return;
	}
	c->state = CS_FINAL;
	conn_send(c, t, p, n);
}

void __attribute__((format(printf, 3, 4))) conn_fail(struct conn *c, int err, const char *fmt, ...)
{
	char m[600];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m, sizeof m, fmt, ap);
	va_end(ap);
	fb_reset();
	fb_num('n', err);
	fb_str('m', m);
	conn_final(c, REPLY_FAILED, fb.d, fb.len);
}

void conn_done(struct conn *c)
{
	conn_final(c, REPLY_DONE, NULL, 0);
}
