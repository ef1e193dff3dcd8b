/* warren-init: shell sessions (`N`, `Q`, `D`): one long-lived bash, the markers that end each query, interrupts. */
#include "init.h"

static void nonce_hex(char *out, size_t nbytes)
{
	unsigned char r[32];
	if (nbytes > sizeof r)
		nbytes = sizeof r;
	size_t got = 0;
	while (got < nbytes) {
		ssize_t n = getrandom(r + got, nbytes - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			/* extremely unlikely; fall back to something unpredictable-ish */
			uint64_t x = (uint64_t)mono() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)&x;
			for (; got < nbytes; got++, x = x * 6364136223846793005ULL + 1442695040888963407ULL)
				r[got] = (unsigned char)(x >> 56);
			break;
		}
		got += (size_t)n;
	}
	static const char hx[] = "0123456789abcdef";
	for (size_t i = 0; i < nbytes; i++) {
		out[2 * i] = hx[r[i] >> 4];
		out[2 * i + 1] = hx[r[i] & 15];
	}
	out[2 * nbytes] = 0;
}

void sess_close_pipes(struct sess *s)
{
	if (s->out_fd >= 0)
		close(s->out_fd);
	if (s->err_fd >= 0)
		close(s->err_fd);
	s->out_fd = s->err_fd = -1;
}

static void sess_reset_q(struct sess *s)
{
	s->deadline = 0;
	s->istage = 0;
	s->istage_until = 0;
	s->ipending = 0;
	s->ipend_until = 0;
	s->timed_out = 0;
	s->started = s->ended = s->code = s->sync = 0;
	s->sync_until = 0;
}

static void sess_dead(struct sess *s)
{
	if (s->in_fd >= 0)
		close(s->in_fd);
	s->in_fd = -1;
	bfree(&s->inb);
	sess_close_pipes(s);
	if (s->state == SS_SPAWN || s->state == SS_BOOT) {
		if (s->conn) {
			char d[64];
			if (WIFEXITED(s->status))
				snprintf(d, sizeof d, "exit code %d", WEXITSTATUS(s->status));
			else
				snprintf(d, sizeof d, "signal %d", WTERMSIG(s->status));
			conn_fail(s->conn, ECHILD, "session: shell exited during startup (%s)", d);
		}
		s->freeme = 1;
	} else if (s->state == SS_BUSY) {
		struct conn *c = s->conn;
		if (clive(c)) {
			if (!s->so.done && !s->so.in_tail && !s->so.drop)
				conn_send(c, REPLY_STDOUT, s->so.hold, s->so.hlen);
			if (!s->se.done && !s->se.drop)
				conn_send(c, REPLY_STDERR, s->se.hold, s->se.hlen);
		}
		fb_status(s->status, s->timed_out);
		conn_final(c, REPLY_DONE, fb.d, fb.len);
	}
	s->conn = NULL;
	s->state = SS_DEAD;
	sess_reset_q(s);
	s->grace = 0;
	if (s->deleted || s->id == 0)
		s->freeme = 1;
}

void sess_check(struct sess *s)
{
	if (s->state != SS_DEAD && s->exited && s->ep_fd < 0 && s->out_fd < 0 && s->err_fd < 0)
		sess_dead(s);
}

void sess_exited(struct sess *s, int status)
{
	s->exited = 1;
	s->status = status;
	if (s->out_fd >= 0 || s->err_fd >= 0)
		s->grace = now_ms + GRACE_MS;
	sess_check(s);
}

void sess_kill(struct sess *s)
{
	if (!s->exited)
		kill_tree(s->pid, SIGKILL, KT_GROUP | KT_SELF | KT_DESC | KT_SID);
}

static void sess_q_done(struct sess *s)
{
	fb_reset();
	fb_num('c', s->code);
	if (s->timed_out)
		fb_str('T', "1");
	conn_final(s->conn, REPLY_DONE, fb.d, fb.len);
	s->conn = NULL;
	s->state = SS_IDLE;
	sess_reset_q(s);
}

static void sess_boot_done(struct sess *s)
{
	s->id = ++next_sess_id;
	s->state = SS_IDLE;
	s->boot_until = 0;
	fb_reset();
	fb_num('i', s->id);
	struct conn *c = s->conn;
	s->conn = NULL;
	conn_final(c, REPLY_SESSION, fb.d, fb.len);
}

static void sess_mark(struct sess *s, int which, scan_t *sc);

/* Where the scanner passes a query's output: its connection, as `o` or `r` frames. */
struct sess_out {
	struct conn *c;
	char t;
};

static void sess_emit(void *ctx, const char *p, size_t n)
{
	struct sess_out *o = ctx;
	conn_send(o->c, o->t, p, n);
}

void sess_read(struct sess *s, int which)
{
	int *fdp = which == 1 ? &s->out_fd : &s->err_fd;
	ssize_t n = read(*fdp, rbuf, CHUNK);
	if (n <= 0) {
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		close(*fdp);
		*fdp = -1;
		sess_check(s);
		return;
	}
	scan_t *sc = which == 1 ? &s->so : &s->se;
	if (s->state == SS_BOOT) {
		scan_feed(sc, rbuf, (size_t)n, NULL, NULL);
		if (sc->marked)
			sc->done = 1;
		if (s->so.done && s->se.done)
			sess_boot_done(s);
	} else if (s->state == SS_BUSY) {
		size_t off = 0;
		while (off < (size_t)n && !sc->done) {
			struct sess_out out = {s->conn, which == 1 ? REPLY_STDOUT : REPLY_STDERR};
			off += scan_feed(sc, rbuf + off, (size_t)n - off, clive(s->conn) ? sess_emit : NULL, &out);
			if (!sc->marked)
				break;
			sc->marked = 0;
			sess_mark(s, which, sc);
		}
		if (s->so.done && s->se.done)
			sess_q_done(s);
	}
}

void sess_write(struct sess *s)
{
	if (s->in_fd >= 0 && pipe_drain(s->in_fd, &s->inb) < 0) {
		close(s->in_fd);
		s->in_fd = -1;
		bfree(&s->inb);
	}
}

/* Whether SIGINT is still waiting to be delivered to pid (not yet seen by its handler). */
static int sigint_pending(pid_t pid)
{
	char path[64], b[4096];
	snprintf(path, sizeof path, "/proc/%ld/status", (long)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t r = read(fd, b, sizeof b - 1);
	close(fd);
	if (r <= 0)
		return 0;
	b[r] = 0;
	static const char *keys[] = {"\nSigPnd:", "\nShdPnd:"};
	for (int i = 0; i < 2; i++) {
		const char *p = strstr(b, keys[i]);
		if (p && (strtoull(p + strlen(keys[i]), NULL, 16) & (1ULL << (SIGINT - 1))))
			return 1;
	}
	return 0;
}

/*
 * After a SIGINT, the line that asks for the markers once more ("sync" markers, told apart by
 * their tail): written only once the signal has reached bash, so that bash acts on it before it
 * reads a byte of this line, and led by a spare newline, which is the line bash throws away if it
 * acts on it there. What bash prints between the query's own markers and these is dropped: the
 * newline bash prints for an interrupt, which would otherwise land in the next command.
 */
void sess_sync(struct sess *s)
{
	if (s->sync != 1 || (sigint_pending(s->pid) && now_ms < s->sync_until))
		return;
	char l[200];
	snprintf(l, sizeof l, "\nprintf '%%s' \"\n__W_O_%ss $?\n\"; printf '%%s' \"\n__W_E_%ss\n\" >&2\n", s->no, s->ne);
	bappend(&s->inb, l, strlen(l));
	sess_write(s);
	if (s->so.done)
		scan_rearm(&s->so);
	if (s->se.done)
		scan_rearm(&s->se);
	s->sync = 2;
}

/*
 * Interrupt the query's script. bash checks for SIGINT after each byte it adds to a line it reads
 * and, when it finds one, throws away that line so far, though not what it has read ahead: a
 * signal that lands while bash reads a line would cut it and run its rest as a command of its own
 * (a fragment of the script, a quote left open that swallows what follows). So the query is one
 * line whose first command prints a "go" marker (the whole line is read by then), its last the
 * end markers; the signal goes only after "go", and the sync line (sess_sync) after the signal.
 */
void sess_sigint(struct sess *s)
{
	s->ipending = 0;
	kill(-s->pid, SIGINT);
	s->istage = 1;
	s->istage_until = now_ms + SESS_INT_MS;
	s->sync = 1;
	s->sync_until = now_ms + SESS_SYNC_MS;
	sess_sync(s);
}

void sess_interrupt(struct sess *s)
{
	if (s->state != SS_BUSY || s->istage || s->ipending || s->exited)
		return;
	if (!s->started) {
		/* bash has not read the whole line yet: the signal waits for "go" (or a while) */
		s->ipending = 1;
		s->ipend_until = now_ms + SESS_GO_MS;
		return;
	}
	sess_sigint(s);
}

/* A marker was seen on stdout (1) or stderr (2). */
static void sess_mark(struct sess *s, int which, scan_t *sc)
{
	char k = sc->tail[0];
	if (which == 1 && k == 'g') {
		s->started = 1;
		if (s->ipending)
			sess_sigint(s);
		return;
	}
	if (k == 's') {
		if (which == 1 && !s->ended)
			s->code = atoi(sc->tail + 1);
		sc->done = 1;
		return;
	}
	if (which == 1) {
		s->ended = 1;
		s->code = atoi(sc->tail);
	}
	if (s->sync)
		scan_rearm(sc);
	else
		sc->done = 1;
}

static const char *bootstrap_fmt =
	"set +o emacs +o vi 2>/dev/null\n"
	"PS1=; PS2=; PS4=; unset PROMPT_COMMAND MAILCHECK MAIL MAILPATH HISTFILE 2>/dev/null\n"
	"set +H +o history 2>/dev/null\n"
	"printf '%%s\\n' %s; printf '%%s\\n' %s >&2\n";

void sess_ep(struct sess *s)
{
	int err;
	char msg[500];
	if (!read_ep(&s->ep_fd, &err, msg, sizeof msg))
		return;
	if (err) {
		fb_reset();
		fb_num('n', err);
		fb_str('m', msg);
		conn_final(s->conn, REPLY_FAILED, fb.d, fb.len);
		s->conn = NULL;
		s->freeme = 1;
		s->state = SS_DEAD;
		if (s->in_fd >= 0)
			close(s->in_fd);
		s->in_fd = -1;
		sess_close_pipes(s);
		return;
	}
	char nonce[40], pat[64], line[512];
	nonce_hex(nonce, 16);
	snprintf(pat, sizeof pat, "__W_B_%s\n", nonce);
	scan_init(&s->so, pat, 0);
	scan_init(&s->se, pat, 0);
	pat[strlen(pat) - 1] = 0;
	snprintf(line, sizeof line, bootstrap_fmt, pat, pat);
	bappend(&s->inb, line, strlen(line));
	s->state = SS_BOOT;
	s->boot_until = now_ms + SESS_BOOT_MS;
	sess_write(s);
	sess_check(s);
}

static struct sess *sess_find(const field_t *f, size_t nf)
{
	const field_t *i = fget(f, nf, 'i');
	unsigned long long id;
	if (!i || fnum(i, 10, INT_MAX, &id) < 0 || id == 0)
		return NULL;
	for (struct sess *s = sesss; s; s = s->next)
		if (s->id == (int)id && !s->deleted && !s->freeme)
			return s;
	return NULL;
}

void op_new_session(struct conn *c, const field_t *f, size_t nf)
{
	struct spawn_args sa;
	if (spawn_args_build(f, nf, &sa)) {
		conn_fail(c, EINVAL, "session: invalid request");
		return;
	}
	int fds[4];
	pid_t pid = spawn(&sa, 1, fds);
	spawn_args_free(&sa);
	if (pid < 0) {
		conn_fail(c, -pid, "session: %s", strerror(-pid));
		return;
	}
	struct sess *s = xrealloc(NULL, sizeof *s);
	memset(s, 0, sizeof *s);
	s->pid = pid;
	s->in_fd = fds[0];
	s->out_fd = fds[1];
	s->err_fd = fds[2];
	s->ep_fd = fds[3];
	s->state = SS_SPAWN;
	s->conn = c;
	s->boot_until = now_ms + SESS_BOOT_MS;
	s->next = sesss;
	sesss = s;
	c->sess = s;
}

static void sq_append(buf_t *b, const char *s, size_t n)
{
	bappend(b, "'", 1);
	size_t st = 0;
	for (size_t i = 0; i < n; i++)
		if (s[i] == '\'') {
			bappend(b, s + st, i - st);
			bappend(b, "'\\''", 4);
			st = i + 1;
		}
	bappend(b, s + st, n - st);
	bappend(b, "'", 1);
}

static int valid_env_key(const char *k, size_t n)
{
	if (!n || !(isalpha((unsigned char)k[0]) || k[0] == '_'))
		return 0;
	for (size_t i = 1; i < n; i++)
		if (!(isalnum((unsigned char)k[i]) || k[i] == '_'))
			return 0;
	return 1;
}

void op_query(struct conn *c, const field_t *f, size_t nf)
{
	struct sess *s = sess_find(f, nf);
	if (!s) {
		conn_fail(c, ESRCH, "session: no such session");
		return;
	}
	if (s->state == SS_DEAD || s->in_fd < 0) {
		conn_fail(c, ESRCH, "session ended");
		return;
	}
	if (s->state != SS_IDLE) {
		conn_fail(c, EBUSY, "session busy");
		return;
	}
	const field_t *C = fget(f, nf, 'C'), *cwd = fget(f, nf, 'c'), *tf = fget(f, nf, 't');
	unsigned long long t = 0;
	if (!C || fhasnul(C) || (cwd && fhasnul(cwd)) || (tf && tf->n && fnum(tf, 10, 1000000000000ULL, &t) < 0)) {
		conn_fail(c, EINVAL, "session: invalid request");
		return;
	}
	sess_reset_q(s);
	nonce_hex(s->no, 16);
	nonce_hex(s->ne, 16);
	/* One line (sess_sigint): the "go" marker, the script, the end markers. Each marker is one
	 * `%s` of a string made before printing: SIGINT cannot cut it after its leading newline (the
	 * shell's stdout is line-buffered), which would leak that newline into the output. Newlines
	 * are literal inside the quotes. */
	char mk[200];
	buf_t line = {0};
	snprintf(mk, sizeof mk, "printf '%%s' \"\n__W_O_%sg\n\"; ", s->no);
	bappend(&line, mk, strlen(mk));
	if (cwd && cwd->n) {
		bappend(&line, "cd -- ", 6);
		sq_append(&line, cwd->v, cwd->n);
		bappend(&line, " && ", 4);
	}
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k != 'e')
			continue;
		const char *eq = memchr(f[i].v, '=', f[i].n);
		if (!eq || fhasnul(&f[i]) || !valid_env_key(f[i].v, (size_t)(eq - f[i].v))) {
			bfree(&line);
			conn_fail(c, EINVAL, "session: invalid environment variable");
			return;
		}
		bappend(&line, f[i].v, (size_t)(eq - f[i].v) + 1);
		sq_append(&line, eq + 1, f[i].n - (size_t)(eq - f[i].v) - 1);
		bappend(&line, " ", 1);
	}
	/* `command eval`: the assignments stay temporary */
	bappend(&line, "command eval ", 13);
	sq_append(&line, C->v, C->n);
	snprintf(mk, sizeof mk, " </dev/null; printf '%%s' \"\n__W_O_%s $?\n\"; printf '%%s' \"\n__W_E_%s\n\" >&2\n", s->no, s->ne);
	bappend(&line, mk, strlen(mk));
	bappend(&s->inb, line.d + line.off, bused(&line));
	bfree(&line);
	char po[64], pe[64];
	snprintf(po, sizeof po, "\n__W_O_%s", s->no);
	snprintf(pe, sizeof pe, "\n__W_E_%s", s->ne);
	scan_init(&s->so, po, 1);
	scan_init(&s->se, pe, 1);
	s->deadline = t ? now_ms + (int64_t)t : 0;
	s->state = SS_BUSY;
	s->conn = c;
	c->sess = s;
	sess_write(s);
	/* accepted: tell the edge before any output */
	fb_reset();
	fb_num('p', s->pid);
	conn_send(c, REPLY_STARTED, fb.d, fb.len);
}

void op_delete_session(struct conn *c, const field_t *f, size_t nf)
{
	struct sess *s = sess_find(f, nf);
	if (!s) {
		conn_fail(c, ESRCH, "session: no such session");
		return;
	}
	s->deleted = 1;
	if (s->state == SS_DEAD)
		s->freeme = 1;
	else
		sess_kill(s);
	conn_done(c);
}
