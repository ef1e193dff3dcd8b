/* warren-init: a request's first frame to its operation, and the client frames that follow it. */
#include "init.h"

static void handle_request(struct conn *c, int type, const char *p, size_t n)
{
	field_t *f;
	size_t nf;
	if (parse_fields(p, n, &f, &nf) < 0) {
		c->gone = 1;
		return;
	}
	c->op = (char)type;
	c->state = CS_OP;
	/* A FnCall worker's init keeps CAP_SYS_ADMIN for its calls' namespaces: it runs nothing else. */
	if (fn_mode && type != REQ_HELLO && type != REQ_FN) {
		conn_fail(c, EPERM, "a FnCall worker runs only FnCalls");
		free(f);
		return;
	}
	switch (type) {
	case REQ_HELLO:
		fb_reset();
		fb_str('v', PROTO_VERSION);
		fb_num('p', getpid());
		conn_final(c, REPLY_HELLO, fb.d, fb.len);
		break;
	case REQ_EXEC: op_exec(c, f, nf); break;
	case REQ_SIGNAL_COMMAND: op_signal(c, f, nf); break;
	case REQ_FN:
		if (fn_mode)
			op_fn(c, p, n, f, nf);
		else
			conn_fail(c, EPERM, "fn: this sandbox is not a FnCall worker");
		break;
	case REQ_NEW_SESSION: op_new_session(c, f, nf); break;
	case REQ_SESSION_RUN: op_query(c, f, nf); break;
	case REQ_END_SESSION: op_delete_session(c, f, nf); break;
	case REQ_READ: op_read(c, f, nf); break;
	case REQ_WRITE: op_write(c, f, nf); break;
	case REQ_STAT: op_stat(c, f, nf); break;
	case REQ_LIST: op_list(c, f, nf); break;
	case REQ_REMOVE: op_delete(c, f, nf); break;
	case REQ_MKDIR: op_mkdir(c, f, nf); break;
	case REQ_MOVE: op_rename(c, f, nf); break;
	case REQ_ATTRS: op_attrs(c, f, nf); break;
	case REQ_SETUP: op_setup(c, f, nf); break;
	default: c->gone = 1; break;
	}
	free(f);
}

/*
 * A frame where a request is due: `Y` keeps the connection for more; on a kept one, what the
 * edge still sent of the operation that ended (stdin, its end, a signal, a size) is dropped.
 */
static void conn_request(struct conn *c, int type, const char *p, size_t n)
{
	if (type == REQ_REUSE && n == 0) {
		c->reuse = 1;
		return;
	}
	if (c->reuse && (type == CLIENT_DATA || type == CLIENT_EOF || type == CLIENT_SIGNAL || type == CLIENT_RESIZE))
		return;
	handle_request(c, type, p, n);
}

static int parse_signal(const char *p, size_t n)
{
	field_t *f;
	size_t nf;
	unsigned long long s = 0;
	if (parse_fields(p, n, &f, &nf) < 0)
		return -1;
	const field_t *sf = fget(f, nf, 's');
	int ok = sf && fnum(sf, 10, 64, &s) == 0;
	free(f);
	return ok ? (int)s : -1;
}

/* Payload bytes of an `i` frame (all of it, or a piece while it streams in). */
static void client_data(struct conn *c, const char *p, size_t n)
{
	if (c->op == REQ_EXEC) {
		struct cmd *m = c->cmd;
		if (m && m->in_fd >= 0 && !m->in_eof) {
			bappend(&m->inb, p, n);
			cmd_write_stdin(m);
		}
	} else if (c->op == REQ_WRITE && c->ffd >= 0) {
		write_chunk(c, p, n);
	}
}

static void handle_client_frame(struct conn *c, int type, const char *p, size_t n)
{
	switch (c->op) {
	case REQ_EXEC: {
		struct cmd *m = c->cmd;
		if (type == CLIENT_DATA) {
			client_data(c, p, n);
		} else if (type == CLIENT_EOF) {
			if (m) {
				/* A terminal's end of input is its EOF character, as typed (^D). */
				if (m->pty && m->in_fd >= 0 && !m->in_eof)
					bappend(&m->inb, "\x04", 1);
				m->in_eof = 1;
				cmd_write_stdin(m);
			}
		} else if (type == CLIENT_SIGNAL) {
			int sig = parse_signal(p, n);
			if (sig < 0) {
				c->gone = 1;
				return;
			}
			if (m && !m->exited)
				kill_tree(m->pid, sig, KT_GROUP | KT_SELF | KT_DESC | KT_SID);
		} else if (type == CLIENT_RESIZE) {
			/* A terminal's new size: "COLS ROWS" (a command without one ignores it). */
			unsigned short cols, rows;
			if (pty_parse_size(p, n, &cols, &rows)) {
				c->gone = 1;
				return;
			}
			if (m && m->pty && m->out_fd >= 0)
				pty_resize(m->out_fd, cols, rows);
		} else {
			c->gone = 1;
		}
		return;
	}
	case REQ_FN:
		if (type == CLIENT_SIGNAL && parse_signal(p, n) >= 0) {
			if (c->cmd)
				fn_kill(c->cmd);
			return;
		}
		c->gone = 1;
		return;
	case REQ_WRITE:
		if (type == CLIENT_DATA && c->ffd >= 0)
			client_data(c, p, n);
		else if (type == CLIENT_EOF && c->ffd >= 0)
			write_end(c);
		else
			c->gone = 1;
		return;
	case REQ_SESSION_RUN:
		if (type == CLIENT_SIGNAL && parse_signal(p, n) >= 0) {
			if (c->sess && c->sess->conn == c)
				sess_interrupt(c->sess);
			return;
		}
		c->gone = 1;
		return;
	default:
		c->gone = 1;
		return;
	}
}

static void conn_eof(struct conn *c, short rev)
{
	c->rd_eof = 1;
	if (c->state == CS_REQ || c->state == CS_LINGER || (c->state == CS_OP && c->op == REQ_WRITE)) {
		c->gone = 1;
		return;
	}
	if (c->state == CS_OP && c->op == REQ_EXEC && c->cmd)
		cmd_close_stdin(c->cmd);
	if (c->state == CS_FINAL && !bused(&c->out))
		c->gone = 1;
	if (rev & POLLHUP)
		c->gone = 1;
}

void conn_read(struct conn *c, short rev)
{
	if (c->state >= CS_FINAL) {
		ssize_t n = read(c->fd, rbuf, sizeof rbuf);
		if (n == 0)
			conn_eof(c, rev);
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			c->gone = 1;
		return;
	}
	breserve(&c->in, 16384);
	ssize_t n = read(c->fd, c->in.d + c->in.len, c->in.cap - c->in.len);
	if (n == 0) {
		conn_eof(c, rev);
		return;
	}
	if (n < 0) {
		if (errno != EAGAIN && errno != EINTR)
			c->gone = 1;
		return;
	}
	c->in.len += (size_t)n;
	while (!c->gone && c->state < CS_FINAL) {
		if (c->ipart) {
			size_t take = bused(&c->in) < c->ipart ? bused(&c->in) : c->ipart;
			if (!take)
				break;
			c->ipart -= take;
			client_data(c, c->in.d + c->in.off, take);
			if (c->in.d)
				bconsume(&c->in, take);
			continue;
		}
		if (bused(&c->in) < 4)
			break;
		uint32_t N = get32(c->in.d + c->in.off);
		if (N == 0 || N > MAX_FRAME) {
			c->gone = 1;
			return;
		}
		if (bused(&c->in) < 5)
			break;
		if (bused(&c->in) < 4 + (size_t)N) {
			/* stream big stdin/file chunks instead of buffering whole frames */
			if (c->state == CS_OP && c->in.d[c->in.off + 4] == CLIENT_DATA && (c->op == REQ_EXEC || c->op == REQ_WRITE)) {
				bconsume(&c->in, 5);
				c->ipart = N - 1;
				continue;
			}
			break;
		}
		const char *fr = c->in.d + c->in.off + 4;
		if (c->state == CS_REQ)
			conn_request(c, (unsigned char)fr[0], fr + 1, N - 1);
		else
			handle_client_frame(c, (unsigned char)fr[0], fr + 1, N - 1);
		if (c->in.d)
			bconsume(&c->in, 4 + (size_t)N);
	}
	/* A kept connection waiting for its next request holds no buffer (paused sandboxes keep theirs). */
	if (c->state >= CS_FINAL || (c->state == CS_REQ && c->reuse && !bused(&c->in)))
		bfree(&c->in);
}

int conn_wants_input(const struct conn *c)
{
	if (c->rd_eof)
		return 0;
	if (c->state == CS_OP && c->op == REQ_EXEC && c->cmd && bused(&c->cmd->inb) >= HIGH_WATER)
		return 0;
	return 1;
}

/* Detach and free gone connections, finished objects. */
void cleanup(void)
{
	int freed = 0;
	for (struct conn **pp = &conns; *pp;) {
		struct conn *c = *pp;
		if (c->state == CS_LINGER && now_ms >= c->linger_until)
			c->gone = 1;
		if (!c->gone) {
			pp = &c->next;
			continue;
		}
		if (c->cmd) {
			c->cmd->conn = NULL;
			cmd_close_stdin(c->cmd);
			/* Nobody waits for a FnCall's answer any more. */
			if (c->cmd->fn)
				fn_kill(c->cmd);
		}
		if (c->sess && c->sess->conn == c) {
			struct sess *s = c->sess;
			s->conn = NULL;
			if (s->state == SS_SPAWN || s->state == SS_BOOT) {
				s->deleted = 1;
				sess_kill(s);
			}
		}
		if (c->xop)
			c->xop->conn = NULL;
		if (c->ffd >= 0)
			close(c->ffd);
		if (c->ls)
			lst_free(c->ls);
		close(c->fd);
		bfree(&c->in);
		bfree(&c->out);
		*pp = c->next;
		free(c);
		freed = 1;
	}
	for (struct cmd **pp = &cmds; *pp;) {
		struct cmd *m = *pp;
		if (!m->done) {
			pp = &m->next;
			continue;
		}
		if (m->conn)
			m->conn->cmd = NULL;
		cmd_close_stdin(m);
		cmd_close_out(m);
		if (m->ep_fd >= 0)
			close(m->ep_fd);
		if (m->fn) {
			if (m->st_fd >= 0)
				close(m->st_fd);
			fn_close_cfds(m);
		}
		*pp = m->next;
		free(m);
	}
	for (struct sess **pp = &sesss; *pp;) {
		struct sess *s = *pp;
		if (!(s->freeme && s->exited)) {
			pp = &s->next;
			continue;
		}
		if (s->conn && s->conn->sess == s)
			s->conn->sess = NULL;
		if (s->in_fd >= 0)
			close(s->in_fd);
		if (s->ep_fd >= 0)
			close(s->ep_fd);
		sess_close_pipes(s);
		bfree(&s->inb);
		*pp = s->next;
		free(s);
	}
	for (struct xop **pp = &xops; *pp;) {
		struct xop *x = *pp;
		if (!x->done) {
			pp = &x->next;
			continue;
		}
		*pp = x->next;
		free(x);
	}
	if (freed && !trim_at)
		trim_at = now_ms + 1000;
	if (trim_at && now_ms >= trim_at) {
		trim_at = 0;
		malloc_trim(0);
	}
}

void reap(void)
{
	int st;
	pid_t pid;
	while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
		int found = 0;
		if (pid == zy_pid) {
			zy_pid = 0;
			zy_dead();
			continue;
		}
		for (struct cmd *m = cmds; m && !found; m = m->next)
			if (m->pid == pid && !m->exited) {
				cmd_exited(m, st);
				found = 1;
			}
		for (struct sess *s = sesss; s && !found; s = s->next)
			if (s->pid == pid && !s->exited) {
				sess_exited(s, st);
				found = 1;
			}
		for (struct xop *x = xops; x && !found; x = x->next)
			if (x->pid == pid && !x->done) {
				xop_exited(x, st);
				found = 1;
			}
	}
}
