/* warren-init: commands (`X`): their pipes, stdin, output, exit and time limit. */
#include "init.h"

void cmd_close_stdin(struct cmd *m)
{
	if (m->in_fd >= 0)
		close(m->in_fd);
	m->in_fd = -1;
	bfree(&m->inb);
}

void cmd_close_out(struct cmd *m)
{
	if (m->out_fd >= 0)
		close(m->out_fd);
	if (m->err_fd >= 0)
		close(m->err_fd);
	m->out_fd = m->err_fd = -1;
}

void fb_status(int status, int timed_out)
{
	fb_reset();
	if (WIFEXITED(status))
		fb_num('c', WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		fb_num('s', WTERMSIG(status));
	if (timed_out)
		fb_str('T', "1");
}

static void cmd_check(struct cmd *m)
{
	if (m->done || m->ep_fd >= 0)
		return;
	if (m->failed) {
		if (m->exited)
			m->done = 1;
		return;
	}
	if (!m->exited || m->out_fd >= 0 || m->err_fd >= 0)
		return;
	fb_status(m->status, m->timed_out);
	conn_final(m->conn, REPLY_DONE, fb.d, fb.len);
	m->conn = NULL;
	m->done = 1;
	cmd_close_stdin(m);
}

/* Read one chunk from a command pipe; which: 1 stdout, 2 stderr. Returns bytes read, 0 on EOF/err, -1 on EAGAIN. */
ssize_t cmd_read(struct cmd *m, int which)
{
	int *fdp = which == 1 ? &m->out_fd : &m->err_fd;
	struct conn *c = clive(m->conn) ? m->conn : NULL;
	ssize_t n;
	if (c) {
		size_t room = chunk_room(c);
		breserve(&c->out, room + 5);
		n = read(*fdp, c->out.d + c->out.len + 5, room);
		if (n > 0) {
			put32(c->out.d + c->out.len, (uint32_t)n + 1);
			c->out.d[c->out.len + 4] = which == 1 ? REPLY_STDOUT : REPLY_STDERR;
			c->out.len += (size_t)n + 5;
			conn_flush(c);
		}
	} else {
		n = read(*fdp, rbuf, CHUNK);
	}
	if (n > 0)
		return n;
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return -1;
	close(*fdp);
	*fdp = -1;
	cmd_check(m);
	return 0;
}

void cmd_drain_final(struct cmd *m)
{
	for (int w = 1; w <= 2; w++)
		for (int i = 0; i < 16 && (w == 1 ? m->out_fd : m->err_fd) >= 0; i++)
			if (cmd_read(m, w) <= 0)
				break;
	m->finishing = 0;
	m->grace = 0;
	cmd_close_out(m);
	cmd_check(m);
}

void cmd_ep(struct cmd *m)
{
	int err;
	char msg[500];
	if (!read_ep(&m->ep_fd, &err, msg, sizeof msg))
		return;
	if (err) {
		m->failed = 1;
		cmd_close_out(m);
		cmd_close_stdin(m);
		fb_reset();
		fb_num('n', err);
		fb_str('m', msg);
		conn_final(m->conn, REPLY_FAILED, fb.d, fb.len);
		m->conn = NULL;
	} else if (!m->fn) {
		fb_reset();
		fb_num('p', m->pid);
		if (clive(m->conn))
			conn_send(m->conn, REPLY_STARTED, fb.d, fb.len);
	}
	cmd_check(m);
}

void cmd_write_stdin(struct cmd *m)
{
	if (m->in_fd < 0)
		return;
	int r = pipe_drain(m->in_fd, &m->inb);
	if (r < 0 || (r == 0 && m->in_eof))
		cmd_close_stdin(m);
}

void cmd_exited(struct cmd *m, int status)
{
	m->exited = 1;
	m->status = status;
	m->deadline = 0;
	if (m->out_fd >= 0 || m->err_fd >= 0)
		m->grace = now_ms + GRACE_MS;
	cmd_check(m);
}

void op_exec(struct conn *c, const field_t *f, size_t nf)
{
	struct spawn_args sa;
	unsigned long long t = 0;
	const field_t *tf = fget(f, nf, 't');
	if ((tf && tf->n && fnum(tf, 10, 1000000000000ULL, &t) < 0) || spawn_args_build(f, nf, &sa)) {
		conn_fail(c, EINVAL, "exec: invalid request");
		return;
	}
	int want_stdin = fflag(f, nf, 'i');
	const field_t *pf = fget(f, nf, 'P');
	if (pf && pty_parse_size(pf->v, pf->n, &sa.cols, &sa.rows)) {
		spawn_args_free(&sa);
		conn_fail(c, EINVAL, "exec: invalid terminal size");
		return;
	}
	sa.pty = pf != NULL;
	int fds[4];
	pid_t pid = sa.pty ? spawn_pty(&sa, fds) : spawn(&sa, want_stdin, fds);
	spawn_args_free(&sa);
	if (pid < 0) {
		conn_fail(c, -pid, "exec: %s", strerror(-pid));
		return;
	}
	struct cmd *m = xrealloc(NULL, sizeof *m);
	memset(m, 0, sizeof *m);
	m->pid = pid;
	m->pty = pf != NULL;
	m->in_fd = fds[0];
	m->out_fd = fds[1];
	m->err_fd = fds[2];
	m->ep_fd = fds[3];
	m->conn = c;
	m->deadline = t ? now_ms + (int64_t)t : 0;
	m->next = cmds;
	cmds = m;
	c->cmd = m;
}

/*
 * K: signals a running command by its pid {p}, {s} signal number, as its own `k` frame would
 * (its process group, every descendant, its session). It comes on a connection of its own: the
 * command's own connection may be held behind stdin the command does not read.
 */
void op_signal(struct conn *c, const field_t *f, size_t nf)
{
	unsigned long long pid = 0, sig = 0;
	const field_t *pf = fget(f, nf, 'p'), *sf = fget(f, nf, 's');
	if (!pf || !sf || fnum(pf, 10, INT_MAX, &pid) < 0 || fnum(sf, 10, 64, &sig) < 0 || !pid) {
		conn_fail(c, EINVAL, "signal: invalid request");
		return;
	}
	for (struct cmd *m = cmds; m; m = m->next) {
		if (m->pid != (pid_t)pid || m->fn || m->exited)
			continue;
		kill_tree(m->pid, (int)sig, KT_GROUP | KT_SELF | KT_DESC | KT_SID);
		conn_done(c);
		return;
	}
	conn_fail(c, ESRCH, "signal: no such command");
}
