/* warren-init: FnCall (`F`): per-call namespaces, the Python zygote, a call's files, output and status. */
#include "init.h"

enum { ZY_NONE, ZY_STARTING, ZY_READY, ZY_BROKEN };

#define ZYGOTE_PATH "/.warren/fn-zygote.py"

#define FN_NFD 6

/*
 * In a FnCall worker (WARREN_FN=1 in the init's environment) op F runs one call as PID 1 of new
 * pid, mount, IPC and UTS namespaces with a root of its own (native/fn.c). Exec'd calls (bash,
 * node, and Python where no zygote runs) are cloned by the init and reaped like commands. Python
 * calls are forked by a zygote that paid for the interpreter's start once (native/fn-zygote.py);
 * it reports on a status pipe: "p<pid>\n" once forked, "s<wait status>\n" when the call is over.
 * Errors before the call's code runs come back on the usual error pipe either way.
 */
int fn_mode;

unsigned long fn_tmpfs_kib;

static int zy_state;

pid_t zy_pid;

int zy_fd = -1;

/* The request's files: a `P` path field, then a `B` field with the bytes (repeat). Written by the
 * call's own process, inside its own root. Returns 0 or errno with msg set. */
static int fn_write_files(const field_t *f, size_t nf, char *msg, size_t msz)
{
	const field_t *pf = NULL;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k == 'P') {
			pf = &f[i];
			continue;
		}
		if (f[i].k != 'B')
			continue;
		char *p = fpath(pf);
		pf = NULL;
		if (!p) {
			snprintf(msg, msz, "files: invalid path");
			return EINVAL;
		}
		char *slash = strrchr(p, '/');
		int e = 0;
		const char *what = "mkdir";
		if (slash != p) {
			*slash = 0;
			e = mkdir_p(p, 0755, NULL, &what);
			*slash = '/';
		}
		int fd = e ? -1 : open(p, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
		if (!e && fd < 0)
			e = errno, what = "open";
		for (uint32_t off = 0; !e && off < f[i].n;) {
			ssize_t w = write(fd, f[i].v + off, f[i].n - off);
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0)
				e = errno, what = "write";
			else
				off += (uint32_t)w;
		}
		if (fd >= 0)
			close(fd);
		if (e) {
			snprintf(msg, msz, "files: %s %s: %s", what, p, strerror(e));
			free(p);
			return e;
		}
		free(p);
	}
	return 0;
}

/* Up to 6 descriptors with one byte, on the zygote's socket. */
static int send_fds(int sock, const int *fds, int n)
{
	char b = 'c';
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * FN_NFD)];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof u);
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)n) };
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)n);
	memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)n);
	ssize_t r;
	do
		r = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (r < 0 && errno == EINTR);
	return r == 1 ? 0 : -1;
}

void fn_close_cfds(struct cmd *m)
{
	for (int i = 0; i < FN_NFD; i++) {
		if (m->cfd[i] >= 0)
			close(m->cfd[i]);
		m->cfd[i] = -1;
	}
}

static void fn_fail(struct cmd *m, int err, const char *msg)
{
	fn_close_cfds(m);
	m->zqueued = 0;
	m->failed = 1;
	m->exited = 1;
	cmd_close_out(m);
	if (m->ep_fd >= 0)
		close(m->ep_fd);
	if (m->st_fd >= 0)
		close(m->st_fd);
	m->ep_fd = m->st_fd = -1;
	fb_reset();
	fb_num('n', err);
	fb_str('m', msg);
	conn_final(m->conn, REPLY_FAILED, fb.d, fb.len);
	m->conn = NULL;
	m->done = 1;
}

/* Closes every descriptor from 3 up but the call's own (cfd[0] may be -1). */
static void close_except(const int *keep, int n)
{
	int k[FN_NFD];
	int nk = 0;
	for (int i = 0; i < n; i++)
		if (keep[i] >= 3)
			k[nk++] = keep[i];
	for (int i = 1; i < nk; i++)
		for (int j = i; j > 0 && k[j - 1] > k[j]; j--) {
			int t = k[j];
			k[j] = k[j - 1];
			k[j - 1] = t;
		}
	unsigned lo = 3;
	for (int i = 0; i < nk; i++) {
		if ((unsigned)k[i] > lo)
			syscall(SYS_close_range, lo, (unsigned)k[i] - 1, 0u);
		lo = (unsigned)k[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0u, 0u);
}

/* The call itself on the exec path: PID 1 of its new namespaces, cloned by the init. */
static void __attribute__((noreturn)) fn_child(struct cmd *m, const field_t *f, size_t nf)
{
	int ep = m->cfd[4];
	close_except(m->cfd, FN_NFD);
	child_ep = ep;
	char msg[480];
	struct spawn_args sa;
	if (warren_fn_isolate(fn_tmpfs_kib, 1) < 0)
		child_fail(errno ? errno : EIO, "isolate: %s", warren_fn_error());
	int e = fn_write_files(f, nf, msg, sizeof msg);
	if (e)
		child_fail(e, "%s", msg);
	if (spawn_args_build(f, nf, &sa))
		child_fail(EINVAL, "exec: invalid request");
	if (sa.cwd) {
		const char *what;
		e = mkdir_p(sa.cwd, 0755, NULL, &what);
		if (e)
			child_fail(e, "cwd: %s: %s", sa.cwd, strerror(e));
	}
	child_main(&sa, m->cfd[1], m->cfd[2], m->cfd[3], ep, 0);
}

/* Exec'd calls are cloned straight into their namespaces and reaped by the init like commands. */
static void fn_exec(struct cmd *m, const field_t *f, size_t nf)
{
	if (!fget(f, nf, 'a')) {
		fn_fail(m, ENOEXEC, "fn: no interpreter to run (the image's python3 cannot run the zygote)");
		return;
	}
	/* fork-like clone (no new stack), as the native spawner's: the child returns here. */
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD), NULL, NULL, NULL, 0UL);
	if (pid < 0) {
		fn_fail(m, errno, "fn: clone failed");
		return;
	}
	if (pid == 0)
		fn_child(m, f, nf);
	m->pid = pid;
	fn_close_cfds(m);
	if (m->st_fd >= 0)
		close(m->st_fd);
	m->st_fd = -1;
}

static void zy_send(struct cmd *m)
{
	if (send_fds(zy_fd, m->cfd, FN_NFD) < 0) {
		fn_fail(m, EIO, "fn: the python zygote does not take calls");
		zy_dead();
		return;
	}
	fn_close_cfds(m);
	m->zqueued = 0;
}

/* The zygote: python3 from the default PATH. */
static void zy_start(void)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		zy_state = ZY_BROKEN;
		return;
	}
	char kib[32];
	snprintf(kib, sizeof kib, "%lu", fn_tmpfs_kib);
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		for (int s = 1; s < NSIG; s++)
			if (s != SIGKILL && s != SIGSTOP)
				signal(s, SIG_DFL);
		int nul = open("/dev/null", O_RDWR);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(sv[1], 3) < 0)
			_exit(127);
		syscall(SYS_close_range, 4u, ~0u, 0u);
		setrlimit(RLIMIT_NOFILE, &saved_nofile);
		/* An environment of its own, never a call's: every call is a copy of the zygote's
		 * memory, so nothing of one call may be in it. */
		char *env[] = { "PATH=" DEFAULT_PATH, "LANG=C.UTF-8", "HOME=/root", NULL };
		/* Whether the worker's filter is there for the calls to stack on (fn.h). */
		char *argv[] = { "python3", ZYGOTE_PATH, kib, warren_fn_worker_filtered() ? "1" : "0", NULL };
		const char *path = DEFAULT_PATH;
		char full[PATH_MAX];
		for (const char *p = path; *p;) {
			const char *e = strchr(p, ':');
			size_t dl = e ? (size_t)(e - p) : strlen(p);
			if (dl && dl + 9 < sizeof full) {
				memcpy(full, p, dl);
				memcpy(full + dl, "/python3", 9);
				execve(full, argv, env);
			}
			if (!e)
				break;
			p = e + 1;
		}
		_exit(127);
	}
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		zy_state = ZY_BROKEN;
		return;
	}
	set_nonblock(sv[0]);
	zy_pid = pid;
	zy_fd = sv[0];
	zy_state = ZY_STARTING;
}

/* The zygote is gone. One that never became ready will not: its Python calls are exec'd. */
void zy_dead(void)
{
	int broken = zy_state == ZY_STARTING;
	if (zy_fd >= 0)
		close(zy_fd);
	zy_fd = -1;
	if (zy_pid > 0)
		kill(zy_pid, SIGKILL);
	zy_pid = 0;
	zy_state = broken ? ZY_BROKEN : ZY_NONE;
	for (struct cmd *m = cmds; m; m = m->next) {
		if (!m->zqueued)
			continue;
		m->zqueued = 0;
		/* The exec path needs the request's fields: kept in the request memfd. */
		off_t n = lseek(m->cfd[0], 0, SEEK_END);
		char *p = n > 0 ? malloc((size_t)n) : NULL;
		field_t *f = NULL;
		size_t nf = 0;
		if (!p || pread(m->cfd[0], p, (size_t)n, 0) != n || parse_fields(p, (size_t)n, &f, &nf) < 0)
			fn_fail(m, EIO, "fn: the python zygote failed to start");
		else
			fn_exec(m, f, nf);
		free(f);
		free(p);
	}
}

void zy_readable(void)
{
	char b[16];
	ssize_t n = recv(zy_fd, b, sizeof b, MSG_DONTWAIT);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		zy_dead();
		return;
	}
	if (zy_state == ZY_STARTING && b[0] == 'r') {
		zy_state = ZY_READY;
		for (struct cmd *m = cmds; m; m = m->next)
			if (m->zqueued)
				zy_send(m);
	}
}

static int memfd_with(const char *name, const void *d, size_t n)
{
	int fd = memfd_create(name, MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	for (size_t off = 0; off < n;) {
		ssize_t w = write(fd, (const char *)d + off, n - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			close(fd);
			return -1;
		}
		off += (size_t)w;
	}
	lseek(fd, 0, SEEK_SET);
	return fd;
}

/*
 * F: `l` "python" (forked from the zygote) or absent; `a` argv (the exec path, and Python's
 * where no zygote runs); `C` the Python code; `e` the whole environment; `c` cwd; `t` timeout
 * ms; `I` stdin bytes; `P`/`B` files. Replies like E: `o`/`r` output, then `x` with the status.
 */
void op_fn(struct conn *c, const char *p, size_t n, const field_t *f, size_t nf)
{
	unsigned long long t = 0;
	const field_t *tf = fget(f, nf, 't');
	if (tf && tf->n && fnum(tf, 10, 1000000000000ULL, &t) < 0) {
		conn_fail(c, EINVAL, "fn: invalid request");
		return;
	}
	const field_t *lf = fget(f, nf, 'l'), *in = fget(f, nf, 'I');
	int python = lf && lf->n == 6 && !memcmp(lf->v, "python", 6);
	struct cmd *m = xrealloc(NULL, sizeof *m);
	memset(m, 0, sizeof *m);
	m->fn = 1;
	m->in_fd = -1;
	for (int i = 0; i < FN_NFD; i++)
		m->cfd[i] = -1;
	int out[2] = { -1, -1 }, err[2] = { -1, -1 }, ep[2] = { -1, -1 }, st[2] = { -1, -1 };
	m->cfd[0] = python ? memfd_with("fn-request", p, n) : -2;
	m->cfd[1] = memfd_with("fn-stdin", in ? in->v : "", in ? in->n : 0);
	if (m->cfd[0] == -1 || m->cfd[1] < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 ||
	    pipe2(ep, O_CLOEXEC) < 0 || pipe2(st, O_CLOEXEC) < 0) {
		int e = errno;
		int all[] = { out[0], out[1], err[0], err[1], ep[0], ep[1], st[0], st[1] };
		for (int i = 0; i < 8; i++)
			if (all[i] >= 0)
				close(all[i]);
		if (m->cfd[0] == -2)
			m->cfd[0] = -1;
		fn_close_cfds(m);
		free(m);
		conn_fail(c, e, "fn: %s", strerror(e));
		return;
	}
	if (m->cfd[0] == -2)
		m->cfd[0] = -1;
	m->cfd[2] = out[1];
	m->cfd[3] = err[1];
	m->cfd[4] = ep[1];
	m->cfd[5] = st[1];
	m->out_fd = out[0];
	m->err_fd = err[0];
	m->ep_fd = ep[0];
	m->st_fd = st[0];
	set_nonblock(m->out_fd);
	set_nonblock(m->err_fd);
	set_nonblock(m->ep_fd);
	set_nonblock(m->st_fd);
	m->conn = c;
	m->deadline = t ? now_ms + (int64_t)t : 0;
	m->next = cmds;
	cmds = m;
	c->cmd = m;
	if (python && zy_state == ZY_NONE)
		zy_start();
	if (python && zy_state == ZY_READY)
		zy_send(m);
	else if (python && zy_state == ZY_STARTING)
		m->zqueued = 1;
	else
		fn_exec(m, f, nf);
}

/* The zygote's "p<pid>" and "s<status>" lines for a call. */
void fn_status(struct cmd *m)
{
	for (;;) {
		ssize_t r = read(m->st_fd, m->st + m->stn, sizeof m->st - 1 - m->stn);
		if (r < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (r <= 0) {
			close(m->st_fd);
			m->st_fd = -1;
			/* The zygote died before the call's end (or never forked it). */
			if (m->pid > 0 && !m->exited)
				kill(m->pid, SIGKILL);
			if (!m->exited)
				cmd_exited(m, W_EXITCODE(0, SIGKILL));
			return;
		}
		m->stn += (size_t)r;
		m->st[m->stn] = 0;
		char *nl;
		while ((nl = strchr(m->st, '\n'))) {
			*nl = 0;
			long v = strtol(m->st + 1, NULL, 10);
			if (m->st[0] == 'p' && v > 0 && !m->pid) {
				m->pid = (pid_t)v;
				if (m->kill_pending)
					kill(m->pid, SIGKILL);
			} else if (m->st[0] == 's' && !m->exited) {
				cmd_exited(m, (int)v);
			}
			size_t used = (size_t)(nl - m->st) + 1;
			memmove(m->st, nl + 1, m->stn - used + 1);
			m->stn -= used;
		}
		if (m->stn == sizeof m->st - 1)
			m->stn = 0;
	}
}

/* Ends a call at once: SIGKILL to its PID 1 ends its whole pid namespace. */
void fn_kill(struct cmd *m)
{
	if (m->exited)
		return;
	if (m->pid > 0)
		kill(m->pid, SIGKILL);
	else
		m->kill_pending = 1;
}
