/* warren-init: starting a command: users and groups from the image's files, the environment, the child's set-up and exec. */
#include "init.h"

void spawn_args_free(struct spawn_args *sa)
{
	if (sa->argv)
		for (char **p = sa->argv; *p; p++)
			free(*p);
	if (sa->env)
		for (size_t i = 0; i < sa->nenv; i++)
			free(sa->env[i]);
	free(sa->argv);
	free(sa->env);
	free(sa->cwd);
	free(sa->user);
	memset(sa, 0, sizeof *sa);
}

/* Returns 0 or EINVAL. */
int spawn_args_build(const field_t *f, size_t nf, struct spawn_args *sa)
{
	size_t na = 0, ne = 0;
	memset(sa, 0, sizeof *sa);
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k == 'a')
			na++;
		else if (f[i].k == 'e')
			ne++;
	}
	if (!na)
		return EINVAL;
	sa->argv = xrealloc(NULL, (na + 1) * sizeof(char *));
	sa->env = xrealloc(NULL, (ne + 6) * sizeof(char *)); /* + PATH, HOME, USER, LOGNAME, TERM defaults */
	size_t ia = 0;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k == 'a') {
			if (fhasnul(&f[i]))
				goto inval;
			sa->argv[ia++] = xstrndup(f[i].v, f[i].n);
			sa->argv[ia] = NULL;
		} else if (f[i].k == 'e') {
			const char *eq = memchr(f[i].v, '=', f[i].n);
			if (fhasnul(&f[i]) || !eq || eq == f[i].v)
				goto inval;
			sa->env[sa->nenv++] = xstrndup(f[i].v, f[i].n);
		}
	}
	sa->argv[ia] = NULL;
	sa->env[sa->nenv] = NULL;
	const field_t *c = fget(f, nf, 'c');
	if (c && c->n) {
		if (fhasnul(c))
			goto inval;
		sa->cwd = xstrndup(c->v, c->n);
	}
	const field_t *u = fget(f, nf, 'U');
	if (u && u->n) {
		if (fhasnul(u) || memchr(u->v, ':', u->n) || memchr(u->v, '\n', u->n))
			goto inval;
		sa->user = xstrndup(u->v, u->n);
	}
	return 0;
inval:
	sa->argv[ia] = NULL;
	sa->env[sa->nenv] = NULL;
	spawn_args_free(sa);
	return EINVAL;
}

int child_ep = -1;

void __attribute__((noreturn, format(printf, 2, 3))) child_fail(int err, const char *fmt, ...)
{
	struct {
		int err;
		char msg[480];
	} m;
	va_list ap;
	memset(&m, 0, sizeof m);
	m.err = err ? err : EIO;
	va_start(ap, fmt);
	vsnprintf(m.msg, sizeof m.msg, fmt, ap);
	va_end(ap);
	if (write(child_ep, &m, sizeof(int) + strlen(m.msg) + 1) < 0) {
	}
	_exit(127);
}

static const char *env_get(char **env, const char *key)
{
	size_t kl = strlen(key);
	for (; *env; env++)
		if (!strncmp(*env, key, kl) && (*env)[kl] == '=')
			return *env + kl + 1;
	return NULL;
}

static void env_default(struct spawn_args *sa, const char *key, const char *val)
{
	if (env_get(sa->env, key))
		return;
	size_t l = strlen(key) + strlen(val) + 2;
	char *s = malloc(l);
	if (!s)
		return;
	snprintf(s, l, "%s=%s", key, val);
	sa->env[sa->nenv++] = s;
	sa->env[sa->nenv] = NULL;
}

static void exec_file(const char *path, char **argv, char **env)
{
	execve(path, argv, env);
	if (errno == ENOEXEC) {
		size_t n = 0;
		while (argv[n])
			n++;
		char **nv = malloc((n + 2) * sizeof(char *));
		if (!nv) {
			errno = ENOEXEC;
			return;
		}
		nv[0] = "sh";
		nv[1] = (char *)path;
		for (size_t i = 1; i <= n; i++)
			nv[i + 1] = argv[i];
		execve("/bin/sh", nv, env);
		errno = ENOEXEC;
	}
}

void __attribute__((noreturn)) child_main(struct spawn_args *sa, int in_r, int out_w, int err_w, int ep, int ctty)
{
	child_ep = ep;
	/* What the init ignores, its program gets at the default (an ignored signal stays ignored
	 * across an exec; the init has no handlers, and every other disposition is the default). */
	for (size_t i = 0; i < sizeof init_ignored / sizeof *init_ignored; i++)
		signal(init_ignored[i], SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		child_fail(errno, "setsid: %s", strerror(errno));
	if (in_r < 0) {
		in_r = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (in_r < 0) {
			int p[2];
			if (pipe2(p, O_CLOEXEC) < 0)
				child_fail(errno, "stdin: %s", strerror(errno));
			close(p[1]);
			in_r = p[0];
		}
	}
	if (dup2(in_r, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		child_fail(errno, "dup2: %s", strerror(errno));
	/* The new session's controlling terminal: its foreground group gets ^C's SIGINT. */
	if (ctty && ioctl(0, TIOCSCTTY, 0) < 0)
		child_fail(errno, "terminal: %s", strerror(errno));
	if (ep > 3)
		syscall(SYS_close_range, 3u, (unsigned)ep - 1, 0u);
	if (syscall(SYS_close_range, (unsigned)ep + 1, ~0u, 0u) < 0) {
		for (int fd = ep + 1; fd < 65536; fd++)
			close(fd);
	}
	setrlimit(RLIMIT_NOFILE, &saved_nofile);
	umask(022);
	/* Commands, not the init, are what the OOM killer should pick when the sandbox's memory
	 * cgroup is full. Raising needs no privilege, but must happen before the uid changes (the
	 * init is non-dumpable, so /proc/self stays root's). Errors are ignored. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom >= 0) {
		if (write(oom, "500", 3) < 0) {
		}
		close(oom);
	}

	struct pwent pw = {0};
	if (sa->user) {
		int found, e = user_resolve(sa->user, &pw, &found);
		if (e == EINVAL)
			child_fail(EINVAL, "user: %s: invalid uid", sa->user);
		if (e)
			child_fail(e, "user: %s: no such user", sa->user);
		gid_t gs[1024];
		size_t ng = found ? user_groups(GROUP_FILE, pw.name, pw.gid, gs, 1024) : 1;
		if (!found)
			gs[0] = pw.gid;
		if (setgroups(ng, gs) < 0)
			child_fail(errno, "user: setgroups: %s", strerror(errno));
		if (setgid(pw.gid) < 0)
			child_fail(errno, "user: setgid: %s", strerror(errno));
		if (setuid(pw.uid) < 0)
			child_fail(errno, "user: setuid: %s", strerror(errno));
	} else {
		uid_t u = getuid();
		if (pw_lookup(PASSWD_FILE, NULL, u, &pw) < 0) {
			static char nb[16];
			snprintf(nb, sizeof nb, "%u", (unsigned)u);
			pw.name = u == 0 ? "root" : nb;
			pw.home = "/";
		}
	}
	env_default(sa, "PATH", DEFAULT_PATH);
	env_default(sa, "HOME", pw.home);
	env_default(sa, "USER", pw.name);
	env_default(sa, "LOGNAME", pw.name);
	if (ctty)
		env_default(sa, "TERM", "xterm-256color");

	if (sa->cwd) {
		if (chdir(sa->cwd) < 0)
			child_fail(errno, "chdir: %s: %s", sa->cwd, strerror(errno));
	} else if (chdir(pw.home) < 0 && chdir("/") < 0) {
		child_fail(errno, "chdir: /: %s", strerror(errno));
	}

	const char *file = sa->argv[0];
	if (!*file)
		child_fail(ENOENT, "exec: %s: %s", file, strerror(ENOENT));
	if (strchr(file, '/')) {
		exec_file(file, sa->argv, sa->env);
		child_fail(errno, "exec: %s: %s", file, strerror(errno));
	}
	const char *path = env_get(sa->env, "PATH");
	if (!path)
		path = DEFAULT_PATH;
	int saw_eacces = 0;
	size_t fl = strlen(file);
	const char *p = path;
	for (;;) {
		const char *e = strchr(p, ':');
		size_t dl = e ? (size_t)(e - p) : strlen(p);
		char full[PATH_MAX];
		if (dl + fl + 2 <= sizeof full) {
			if (dl) {
				memcpy(full, p, dl);
				full[dl] = '/';
				memcpy(full + dl + 1, file, fl + 1);
			} else {
				memcpy(full, file, fl + 1);
			}
			exec_file(full, sa->argv, sa->env);
			switch (errno) {
			case EACCES:
				saw_eacces = 1;
				break;
			case ENOENT:
			case ENOTDIR:
			case ESTALE:
			case ENODEV:
			case ETIMEDOUT:
			case ELOOP:
			case ENAMETOOLONG:
				break;
			default:
				child_fail(errno, "exec: %s: %s", file, strerror(errno));
			}
		}
		if (!e)
			break;
		p = e + 1;
	}
	int err = saw_eacces ? EACCES : ENOENT;
	child_fail(err, "exec: %s: %s", file, strerror(err));
}

/* Forks the child that runs `sa` on these descriptors (see child_main); pep: the error pipe.
 * Returns its pid in the parent, or -errno. */
pid_t fork_child(struct spawn_args *sa, int in, int out, int err, int pep[2], int ctty)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		close(pep[0]);
		child_main(sa, in, out, err, pep[1], ctty);
	}
	return pid;
}

/* fds: [0] stdin write end (or -1), [1] stdout read, [2] stderr read, [3] error pipe read.
 * Returns pid or -errno. */
pid_t spawn(struct spawn_args *sa, int want_stdin, int fds[4])
{
	int pin[2] = {-1, -1}, pout[2] = {-1, -1}, perr[2] = {-1, -1}, pep[2] = {-1, -1};
	int err = 0;
	if ((want_stdin && pipe2(pin, O_CLOEXEC) < 0) || pipe2(pout, O_CLOEXEC) < 0 ||
	    pipe2(perr, O_CLOEXEC) < 0 || pipe2(pep, O_CLOEXEC) < 0) {
		err = errno;
		goto fail;
	}
	pid_t pid = fork_child(sa, pin[0], pout[1], perr[1], pep, 0);
	if (pid < 0) {
		err = -pid;
		goto fail;
	}
	if (pin[0] >= 0)
		close(pin[0]);
	close(pout[1]);
	close(perr[1]);
	close(pep[1]);
	if (pin[1] >= 0)
		set_nonblock(pin[1]);
	set_nonblock(pout[0]);
	set_nonblock(perr[0]);
	set_nonblock(pep[0]);
	fds[0] = pin[1];
	fds[1] = pout[0];
	fds[2] = perr[0];
	fds[3] = pep[0];
	return pid;
fail:
	for (int i = 0; i < 2; i++) {
		if (pin[i] >= 0)
			close(pin[i]);
		if (pout[i] >= 0)
			close(pout[i]);
		if (perr[i] >= 0)
			close(perr[i]);
		if (pep[i] >= 0)
			close(pep[i]);
	}
	return -err;
}

/* Read the child's error report. Returns 1 when resolved (EOF or message), 0 to wait. */
int read_ep(int *epfd, int *err, char *msg, size_t msz)
{
	struct {
		int err;
		char msg[480];
	} m;
	ssize_t n = read(*epfd, &m, sizeof m);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	close(*epfd);
	*epfd = -1;
	*err = 0;
	msg[0] = 0;
	if (n > 0) {
		if ((size_t)n < sizeof(int) + 1) {
			*err = EIO;
			snprintf(msg, msz, "exec: setup failed");
		} else {
			size_t ml = (size_t)n - sizeof(int);
			m.msg[ml - 1 < sizeof m.msg ? ml - 1 : sizeof m.msg - 1] = 0;
			*err = m.err ? m.err : EIO;
			snprintf(msg, msz, "%s", m.msg);
		}
	}
	return 1;
}
