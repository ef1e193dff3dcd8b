/*
 * warren-init: PID 1 of a Warren sandbox.
 *
 * Speaks the framed protocol described in docs/init-protocol.md on connections
 * accepted from the listening unix socket handed over as fd 3. Single-threaded
 * poll() loop; SIGCHLD arrives through a signalfd. This file holds the timers, the
 * poll set and main; the modules are listed in init.h.
 */
#include "init.h"

/* poll set */
enum { K_LISTEN, K_SIG, K_CONN, K_CIN, K_COUT, K_CERR, K_CEP, K_SIN, K_SOUT, K_SERR, K_SEP, K_CST, K_ZY };

struct pent {
	int kind;
	void *obj;
};

/*
 * Runs before main: nothing in the sandbox, the init included, runs unfiltered. A FnCall worker's
 * init keeps mount and namespace calls for its calls' namespaces (each call adds the strict filter
 * itself, fn.c). Fails closed: a sandbox whose filter cannot be installed does not start.
 * WARREN_UNHARDENED=1 (set by the edge only for the hardening benchmark's baseline node) skips it;
 * a process inside that sets it gains nothing, as it runs under its parent's filter already.
 */
__attribute__((constructor)) static void seccomp_at_start(void)
{
	const char *fn = getenv("WARREN_FN"), *off = getenv("WARREN_UNHARDENED");
	if (off && !strcmp(off, "1"))
		return;
	int worker = fn && !strcmp(fn, "1");
	if (warren_seccomp_install(!worker) != 0) {
		fprintf(stderr, "warren-init: seccomp: %s\n", strerror(errno));
		_exit(1);
	}
	warren_fn_set_worker_filtered(worker);
}

/*
 * A batch sandbox (WARREN_CPU_CLASS=batch, set by the edge) runs SCHED_IDLE: the init takes it
 * before anything else runs, and every process of the sandbox inherits it by fork. Leaving it
 * needs RLIMIT_NICE room (or CAP_SYS_NICE of the host's user namespace, which no sandbox has):
 * the hard limit goes to 0 here, and raising a hard limit needs CAP_SYS_RESOURCE there. Fails
 * closed: a batch sandbox that cannot be made idle does not start.
 */
__attribute__((constructor)) static void cpu_class_at_start(void)
{
	const char *c = getenv("WARREN_CPU_CLASS");
	if (!c || strcmp(c, "batch"))
		return;
	struct rlimit none = { 0, 0 };
	struct sched_param sp = { .sched_priority = 0 };
	if (setrlimit(RLIMIT_NICE, &none) != 0 || sched_setscheduler(0, SCHED_IDLE, &sp) != 0) {
		fprintf(stderr, "warren-init: batch CPU class: %s\n", strerror(errno));
		_exit(1);
	}
}

/* Timers and producers. Returns the next deadline (0 = none); *busy set when work is pending now. */
static int64_t run_timers(int *busy)
{
	int64_t next = 0;
#define ARM(t)                                   \
	do {                                     \
		if ((t) && (!next || (t) < next)) \
			next = (t);              \
	} while (0)
	for (struct cmd *m = cmds; m; m = m->next) {
		if (m->done)
			continue;
		if (m->deadline && !m->exited && now_ms >= m->deadline) {
			m->timed_out = 1;
			m->deadline = 0;
			if (m->fn)
				fn_kill(m);
			else
				kill_tree(m->pid, SIGKILL, KT_GROUP | KT_SELF | KT_DESC | KT_SID);
		}
		if (m->grace && now_ms >= m->grace) {
			m->grace = 0;
			if (m->ep_fd >= 0)
				m->grace = now_ms + GRACE_MS;
			else if (cbp(m->conn))
				m->finishing = 1;
			else
				cmd_drain_final(m);
		}
		if (m->finishing && !cbp(m->conn))
			cmd_drain_final(m);
		ARM(m->deadline);
		ARM(m->grace);
	}
	for (struct sess *s = sesss; s; s = s->next) {
		if (s->state == SS_DEAD)
			continue;
		if (s->boot_until && (s->state == SS_SPAWN || s->state == SS_BOOT) && now_ms >= s->boot_until) {
			s->boot_until = 0;
			conn_fail(s->conn, ETIMEDOUT, "session: shell did not start");
			s->conn = NULL;
			s->deleted = 1;
			sess_kill(s);
		}
		if (s->state == SS_BUSY) {
			if (s->deadline && now_ms >= s->deadline) {
				s->deadline = 0;
				s->timed_out = 1;
				sess_interrupt(s);
			}
			if (s->ipending && now_ms >= s->ipend_until)
				sess_sigint(s); /* bash never got to the line */
			if (s->sync == 1) {
				sess_sync(s);
				if (s->sync == 1)
					ARM(now_ms + 1);
			}
			if (s->istage == 1 && now_ms >= s->istage_until) {
				/* the command ignored SIGINT: kill everything below the shell */
				kill_tree(s->pid, SIGKILL, KT_DESC);
				s->istage = 2;
				s->istage_until = now_ms + GRACE_MS + SESS_KILL_MS;
			} else if (s->istage == 2 && now_ms >= s->istage_until) {
				/* the shell itself is stuck: end the session */
				sess_kill(s);
				s->istage = 3;
				s->istage_until = 0;
			}
			ARM(s->deadline);
			ARM(s->istage_until);
			if (s->ipending)
				ARM(s->ipend_until);
		}
		if (s->grace && now_ms >= s->grace) {
			s->grace = 0;
			for (int w = 1; w <= 2; w++)
				for (int i = 0; i < 16 && (w == 1 ? s->out_fd : s->err_fd) >= 0; i++)
					sess_read(s, w);
			sess_close_pipes(s);
			sess_check(s);
		}
		if (s->state == SS_SPAWN || s->state == SS_BOOT)
			ARM(s->boot_until);
		ARM(s->grace);
	}
	for (struct conn *c = conns; c; c = c->next) {
		if (clive(c) && c->state == CS_OP) {
			if (c->op == REQ_READ && c->ffd >= 0)
				*busy |= read_pump(c);
			else if (c->op == REQ_LIST && c->ls)
				*busy |= list_pump(c);
		}
		if (c->state == CS_LINGER)
			ARM(c->linger_until);
	}
#undef ARM
	return next;
}

static struct pollfd *pfds;

static struct pent *pents;

static size_t pn, pcap;

static void padd(int fd, short ev, int kind, void *obj)
{
	if (pn == pcap) {
		pcap = pcap ? pcap * 2 : 64;
		pfds = xrealloc(pfds, pcap * sizeof *pfds);
		pents = xrealloc(pents, pcap * sizeof *pents);
	}
	pfds[pn].fd = fd;
	pfds[pn].events = ev;
	pfds[pn].revents = 0;
	pents[pn].kind = kind;
	pents[pn].obj = obj;
	pn++;
}

static void accept_conns(void)
{
	for (int i = 0; i < 64; i++) {
		int fd = accept4(LISTEN_FD, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd < 0)
			return;
		struct conn *c = xrealloc(NULL, sizeof *c);
		memset(c, 0, sizeof *c);
		c->fd = fd;
		c->ffd = -1;
		c->state = CS_REQ;
		c->next = conns;
		conns = c;
	}
}

/*
 * Writes a file of the sandbox's own /etc as a new file renamed over the old name, so a symlink
 * an image put there is replaced, never followed. Errors are ignored: an image without /etc, or
 * one whose /etc is not writable, runs without the file.
 */
static void etc_put(const char *name, const char *text)
{
	char tmp[64], path[64];
	snprintf(tmp, sizeof tmp, "/etc/.%s.warren", name);
	snprintf(path, sizeof path, "/etc/%s", name);
	unlink(tmp);
	int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	size_t n = strlen(text);
	int ok = write(fd, text, n) == (ssize_t)n;
	close(fd);
	if (!ok || rename(tmp, path) < 0)
		unlink(tmp);
}

/*
 * What Docker gives every container: /etc/hostname with the name the sandbox's UTS namespace
 * has, and /etc/hosts that resolves localhost (IPv4 and IPv6) and that name (to 127.0.1.1, so it
 * resolves with or without a network). Without them, getaddrinfo("localhost") fails in an image
 * that ships no hosts file, and every program that binds or connects to localhost breaks.
 */
static void write_host_files(void)
{
	struct stat st;
	if (lstat("/etc", &st) < 0 || !S_ISDIR(st.st_mode))
		return;
	char host[HOST_NAME_MAX + 1] = "";
	if (gethostname(host, sizeof host - 1) < 0 || !*host)
		snprintf(host, sizeof host, "sandbox");
	char text[HOST_NAME_MAX + 256];
	snprintf(text, sizeof text, "%s\n", host);
	etc_put("hostname", text);
	snprintf(text, sizeof text,
		 "127.0.0.1\tlocalhost\n"
		 "::1\tlocalhost ip6-localhost ip6-loopback\n"
		 "fe00::0\tip6-localnet\n"
		 "ff00::0\tip6-mcastprefix\n"
		 "ff02::1\tip6-allnodes\n"
		 "ff02::2\tip6-allrouters\n"
		 "127.0.1.1\t%s\n",
		 host);
	etc_put("hosts", text);
}

const int init_ignored[4] = {SIGTERM, SIGINT, SIGHUP, SIGPIPE};

int main(void)
{
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	mallopt(M_MMAP_THRESHOLD, 64 * 1024);
	mallopt(M_TRIM_THRESHOLD, 128 * 1024);
	umask(022);
	for (int fd = 0; fd < 3; fd++)
		if (fcntl(fd, F_GETFD) < 0) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
	if (chdir("/") < 0) {
	}
	struct stat lst;
	int so_type = 0;
	socklen_t sl = sizeof so_type;
	if (fstat(LISTEN_FD, &lst) < 0 || !S_ISSOCK(lst.st_mode) ||
	    getsockopt(LISTEN_FD, SOL_SOCKET, SO_TYPE, &so_type, &sl) < 0 || so_type != SOCK_STREAM) {
		fprintf(stderr, "warren-init: fd 3 is not a listening stream socket\n");
		return 1;
	}
	fcntl(LISTEN_FD, F_SETFD, FD_CLOEXEC);
	set_nonblock(LISTEN_FD);
	write_host_files();

	getrlimit(RLIMIT_NOFILE, &saved_nofile);
	struct rlimit rl = saved_nofile;
	rl.rlim_cur = (rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536) ? 65536 : rl.rlim_max;
	if (rl.rlim_cur > saved_nofile.rlim_cur)
		setrlimit(RLIMIT_NOFILE, &rl);

	const char *fnv = getenv("WARREN_FN"), *kib = getenv("WARREN_FN_TMPFS_KIB");
	fn_mode = fnv && !strcmp(fnv, "1");
	fn_tmpfs_kib = kib ? strtoul(kib, NULL, 10) : 0;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			signal(s, SIG_DFL);
	for (size_t i = 0; i < sizeof init_ignored / sizeof *init_ignored; i++)
		signal(init_ignored[i], SIG_IGN);
	sigset_t ss;
	sigemptyset(&ss);
	sigaddset(&ss, SIGCHLD);
	sigprocmask(SIG_BLOCK, &ss, NULL);
	int sfd = signalfd(-1, &ss, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0) {
		fprintf(stderr, "warren-init: signalfd: %s\n", strerror(errno));
		return 1;
	}

	for (;;) {
		now_ms = mono();
		int busy = 0;
		int64_t next = run_timers(&busy);
		cleanup();
		if (trim_at && (!next || trim_at < next))
			next = trim_at;

		pn = 0;
		padd(LISTEN_FD, POLLIN, K_LISTEN, NULL);
		padd(sfd, POLLIN, K_SIG, NULL);
		for (struct conn *c = conns; c; c = c->next) {
			short ev = 0;
			if (conn_wants_input(c))
				ev |= POLLIN;
			if (bused(&c->out))
				ev |= POLLOUT;
			padd(c->fd, ev, K_CONN, c);
		}
		for (struct cmd *m = cmds; m; m = m->next) {
			if (m->in_fd >= 0 && bused(&m->inb))
				padd(m->in_fd, POLLOUT, K_CIN, m);
			if (m->ep_fd >= 0)
				padd(m->ep_fd, POLLIN, K_CEP, m);
			if (m->fn && m->st_fd >= 0)
				padd(m->st_fd, POLLIN, K_CST, m);
			if (m->ep_fd < 0 && !m->failed && !m->finishing && !cbp(m->conn)) {
				if (m->out_fd >= 0)
					padd(m->out_fd, POLLIN, K_COUT, m);
				if (m->err_fd >= 0)
					padd(m->err_fd, POLLIN, K_CERR, m);
			}
		}
		for (struct sess *s = sesss; s; s = s->next) {
			if (s->in_fd >= 0 && bused(&s->inb))
				padd(s->in_fd, POLLOUT, K_SIN, s);
			if (s->ep_fd >= 0)
				padd(s->ep_fd, POLLIN, K_SEP, s);
			if (s->state != SS_SPAWN && !(s->state == SS_BUSY && cbp(s->conn))) {
				if (s->out_fd >= 0)
					padd(s->out_fd, POLLIN, K_SOUT, s);
				if (s->err_fd >= 0)
					padd(s->err_fd, POLLIN, K_SERR, s);
			}
		}
		if (zy_fd >= 0)
			padd(zy_fd, POLLIN, K_ZY, NULL);
		int timeout = -1;
		if (busy)
			timeout = 0;
		else if (next) {
			int64_t d = next - mono();
			timeout = d < 0 ? 0 : d > 60000 ? 60000 : (int)d;
		}
		int r = poll(pfds, pn, timeout);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			fprintf(stderr, "warren-init: poll: %s\n", strerror(errno));
			sleep(1);
			continue;
		}
		now_ms = mono();
		for (size_t i = 0; i < pn && r > 0; i++) {
			short rev = pfds[i].revents;
			if (!rev)
				continue;
			int fd = pfds[i].fd;
			void *o = pents[i].obj;
			switch (pents[i].kind) {
			case K_LISTEN:
				accept_conns();
				break;
			case K_SIG: {
				struct signalfd_siginfo si[8];
				while (read(sfd, si, sizeof si) > 0) {
				}
				reap();
				break;
			}
			case K_CONN: {
				struct conn *c = o;
				if (c->gone || c->fd != fd)
					break;
				if (rev & POLLOUT)
					conn_flush(c);
				if (c->gone)
					break;
				if ((rev & POLLIN) && !c->rd_eof)
					conn_read(c, rev);
				else if (rev & (POLLHUP | POLLERR | POLLNVAL))
					c->gone = 1;
				break;
			}
			case K_CIN: {
				struct cmd *m = o;
				if (!m->done && m->in_fd == fd)
					cmd_write_stdin(m);
				break;
			}
			case K_COUT:
			case K_CERR: {
				struct cmd *m = o;
				int w = pents[i].kind == K_COUT ? 1 : 2;
				if (!m->done && (w == 1 ? m->out_fd : m->err_fd) == fd)
					cmd_read(m, w);
				break;
			}
			case K_CEP: {
				struct cmd *m = o;
				if (!m->done && m->ep_fd == fd)
					cmd_ep(m);
				break;
			}
			case K_CST: {
				struct cmd *m = o;
				if (!m->done && m->st_fd == fd)
					fn_status(m);
				break;
			}
			case K_ZY:
				if (zy_fd == fd)
					zy_readable();
				break;
			case K_SIN: {
				struct sess *s = o;
				if (s->in_fd == fd)
					sess_write(s);
				break;
			}
			case K_SOUT:
			case K_SERR: {
				struct sess *s = o;
				int w = pents[i].kind == K_SOUT ? 1 : 2;
				if ((w == 1 ? s->out_fd : s->err_fd) == fd && !cbp(s->state == SS_BUSY ? s->conn : NULL))
					sess_read(s, w);
				break;
			}
			case K_SEP: {
				struct sess *s = o;
				if (s->ep_fd == fd)
					sess_ep(s);
				break;
			}
			}
		}
	}
}
