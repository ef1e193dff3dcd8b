/*
 * warren-hostd: the edge's host-side helper, a long-running child of the Node process.
 *
 * It does what Node does badly or not at all: mount(2) without a mount binary that parses the
 * mount table, starting sandboxes (spawn.c) and starting runc. Node forks its whole (large)
 * process for every child it spawns, milliseconds of blocked event loop each; this helper is small, so its forks
 * are cheap, and it can hand a freshly bound listening socket to a sandbox's init as fd 3.
 *
 * Requests, one per line on stdin, fields separated by TAB, each starting with a tag the reply
 * repeats (replies may come out of order):
 *   TAG overlay LOWER UPPER WORK TARGET   overlay mount (LOWER may be colon-joined)
 *   TAG erofs FILE TARGET [DATA]          read-only file-backed EROFS mount; DATA: its blob
 *                                         device (file data), a file too
 *   TAG tmpfs TARGET OPTIONS              tmpfs mount (nosuid, nodev, noexec)
 *   TAG idmap SOURCE TARGET MAP           a clone of the mount at SOURCE, idmapped (MAP
 *                                         "IN:OUT:N": ids IN.. on disk seen as OUT..), nodev
 *                                         and nosuid, mounted at TARGET
 *   TAG umount TARGET                     lazy unmount; "not mounted" is ok
 *   TAG mknod HEXPATH TYPE MODE MAJOR MINOR   TYPE c, b or p; MODE octal (layer unpacking)
 *   TAG xattr HEXPATH NAME HEXVALUE       lsetxattr (never follows a symlink)
 *   TAG ping
 *   TAG netns                             a new network namespace (loopback up, sandbox
 *                                         sysctls), held open here: "TAG ok FD"; it is
 *                                         /proc/<this pid>/fd/FD to others
 *   TAG netns-close FD                    lets go of one (it lives on while processes use it)
 *   TAG veth FD HOSTIF HOSTIP SANDBOXIP   in namespace FD (one held here) eth0 with SANDBOXIP/31,
 *                                         up, default route via HOSTIP; its peer HOSTIF on the
 *                                         host with HOSTIP/31, up (hostd-veth.c)
 *   TAG sysfs NETNS TARGET                a read-only sysfs of network namespace NETNS (a path)
 *                                         at TARGET: a sandbox's user namespace may not mount
 *                                         the sysfs of a network namespace it does not own
 *   TAG spawn KEY=VALUE...               start a sandbox's init in new namespaces (spawn.c);
 *                                         the reply "TAG ok PID" comes once it has exec'd
 *   TAG run LOG SOCK FILE ARG...          start FILE (PATH-searched) with stdin/stdout on
 *                                         /dev/null, stderr appended to LOG, and, unless SOCK is
 *                                         "-", a Unix socket listening at SOCK as fd 3; the reply
 *                                         comes when it exits: "TAG ok STATUS" (exit code, or
 *                                         128+signal)
 *   TAG watch PID STARTTIME               report when that process ends (hostd-watch.c): an
 *                                         event line "* exit PID STARTTIME", unasked
 * Replies: "TAG ok[ TAB STATUS]" or "TAG err TAB ERRNO TAB MESSAGE". Exits 0 on EOF of stdin,
 * after its running children have exited.
 *
 * This file reads the requests, runs and reaps children; mounts, device nodes, xattrs and
 * subvolumes are in hostd-mounts.c, network namespaces in hostd-netns.c, sandbox starts in
 * spawn.c.
 */
#include "hostd.h"

#define MAX_LINE (64 * 1024)
#define MAX_FIELDS 256
#define MAX_CHILDREN 4096

struct child {
	pid_t pid;
	char tag[32];
};

static struct child children[MAX_CHILDREN];
static int nchildren;

void reply_ok(const char *tag)
{
	printf("%s\tok\n", tag);
}

void reply_err(const char *tag, int e, const char *what)
{
	printf("%s\terr\t%d\t%s: %s\n", tag, e, what, strerror(e));
}

int listen_at(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -1;
	unlink(path);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 128) < 0) {
		int e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

static void do_run(const char *tag, char **f, int n)
{
	const char *log = f[0], *sock = f[1];
	if (n < 3 || !*log || !*sock || !*f[2] || nchildren == MAX_CHILDREN || strlen(tag) >= sizeof children[0].tag) {
		reply_err(tag, EINVAL, "run");
		return;
	}
	int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0) {
		reply_err(tag, errno, "run: log");
		return;
	}
	int lfd = -1;
	if (strcmp(sock, "-") != 0 && (lfd = listen_at(sock)) < 0) {
		reply_err(tag, errno, "run: socket");
		close(logfd);
		return;
	}
	char *argv[MAX_FIELDS + 1];
	int argc = 0;
	for (int i = 2; i < n; i++)
		argv[argc++] = f[i];
	argv[argc] = NULL;
	pid_t pid = fork();
	if (pid == 0) {
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		signal(SIGPIPE, SIG_DFL);
		int nul = open("/dev/null", O_RDWR);
		if (nul < 0 || dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(logfd, 2) < 0)
			_exit(127);
		if (lfd >= 0 && dup2(lfd, 3) < 0)
			_exit(127);
		if (lfd < 0)
			close(3);
		close_range(4, ~0U, 0);
		execvp(argv[0], argv);
		dprintf(2, "warren-hostd: exec %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	int e = errno;
	close(logfd);
	if (lfd >= 0)
		close(lfd);
	if (pid < 0) {
		reply_err(tag, e, "run: fork");
		return;
	}
	children[nchildren].pid = pid;
	strcpy(children[nchildren].tag, tag);
	nchildren++;
}

/* Kills a program `run` started (named by the tag of its run request);
 * its run request then answers with 128 + SIGKILL. A program that already ended is no error. */
static void do_kill(const char *tag, char **f)
{
	for (int i = 0; i < nchildren; i++) {
		if (strcmp(children[i].tag, f[0]) != 0)
			continue;
		kill(children[i].pid, SIGKILL);
		break;
	}
	reply_ok(tag);
}

/* A `run` program (children[i]) ended with `status`: its request is answered. */
static void ran(int i, int status)
{
	int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	printf("%s\tok\t%d\n", children[i].tag, code);
	children[i] = children[--nchildren];
}

/*
 * The `run` programs that ended, each asked for by its pid. A wait for any child walks all of
 * this helper's children under the kernel's task list lock, and every sandbox's init is one
 * (this is their subreaper): at 10,000 sandboxes every SIGCHLD cost two walks of 10,000.
 */
static void reap_runs(void)
{
	int status;
	for (int i = 0; i < nchildren;) {
		if (waitpid(children[i].pid, &status, WNOHANG) == children[i].pid)
			ran(i, status);
		else
			i++;
	}
}

/* A child was reaped: a `run` program's request is answered, a watched init's end told of. */
static void reaped(pid_t pid, int status)
{
	for (int i = 0; i < nchildren; i++) {
		if (children[i].pid == pid) {
			ran(i, status);
			return;
		}
	}
	watch_reaped(pid);
}

/* The child a SIGCHLD named, if it ended (SIGCHLDs that come together name one of them only). */
static void reap_pid(pid_t pid)
{
	int status;
	if (pid > 0 && waitpid(pid, &status, WNOHANG) == pid)
		reaped(pid, status);
}

/* Every child that ended (spawners' first stages, inits whose SIGCHLD was merged into another's): the walk, once in a while. */
static void reap_all(void)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
		reaped(pid, status);
}

static long long now_ms(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* How long poll may wait: until the walk that is due (a SIGCHLD came since the last), else for ever. */
#define REAP_ALL_MS 1000
static long long last_walk_ms;
static int walk_due;

static int poll_timeout(void)
{
	if (!walk_due)
		return -1;
	long long left = last_walk_ms + REAP_ALL_MS - now_ms();
	return left < 0 ? 0 : (int)left;
}

static void handle(char *line)
{
	char *f[MAX_FIELDS + 1] = { 0 };
	int n = 0;
	char *p = line;
	for (;;) {
		if (n == MAX_FIELDS) {
			char *t = strchr(line, '\t');
			if (t)
				*t = 0;
			reply_err(line, EINVAL, "too many fields");
			return;
		}
		f[n++] = p;
		char *t = strchr(p, '\t');
		if (!t)
			break;
		*t = 0;
		p = t + 1;
	}
	if (n < 2) {
		reply_err(f[0], EINVAL, "no command");
		return;
	}
	const char *tag = f[0], *cmd = f[1];
	char **a = f + 2;
	int na = n - 2;
	if (!strcmp(cmd, "ping") && na == 0)
		reply_ok(tag);
	else if (!strcmp(cmd, "overlay") && na == 4)
		do_overlay(tag, a);
	else if (!strcmp(cmd, "idmap") && na == 3)
		do_idmap(tag, a);
	else if (!strcmp(cmd, "erofs") && (na == 2 || na == 3))
		do_erofs(tag, a, na);
	else if (!strcmp(cmd, "mknod") && na == 5)
		do_mknod(tag, a);
	else if (!strcmp(cmd, "xattr") && na == 3)
		do_xattr(tag, a);
	else if (!strcmp(cmd, "tmpfs") && na == 2)
		do_tmpfs(tag, a);
	else if (!strcmp(cmd, "subvol") && (na == 3 || na == 4))
		do_subvol(tag, a, na);
	else if (!strcmp(cmd, "subvol-delete") && na == 2)
		do_subvol_delete(tag, a);
	else if (!strcmp(cmd, "umount") && na == 1)
		do_umount(tag, a);
	else if (!strcmp(cmd, "netns") && na == 0)
		do_netns(tag);
	else if (!strcmp(cmd, "veth") && na == 4)
		do_veth(tag, a);
	else if (!strcmp(cmd, "netns-close") && na == 1)
		do_netns_close(tag, a);
	else if (!strcmp(cmd, "sysfs") && na == 2)
		do_sysfs(tag, a);
	else if (!strcmp(cmd, "spawn"))
		spawn_start(tag, a, na);
	else if (!strcmp(cmd, "run"))
		do_run(tag, a, na);
	else if (!strcmp(cmd, "kill") && na == 1)
		do_kill(tag, a);
	else if (!strcmp(cmd, "watch") && na == 2)
		do_watch(tag, a);
	else
		reply_err(tag, EINVAL, "unknown command");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	/* Sandbox inits are re-parented here when their short-lived spawner exits (spawn.c). */
	prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, NULL);
	int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	int wfd = watch_fd();
	if (sfd < 0 || wfd < 0)
		return 1;
	static char buf[MAX_LINE + 1];
	size_t used = 0;
	int eof = 0, skipping = 0;
	while (!eof || nchildren > 0 || spawn_busy() > 0) {
		struct pollfd p[3 + SPAWN_MAX_PENDING] = {
			{ .fd = sfd, .events = POLLIN },
			{ .fd = eof ? -1 : 0, .events = POLLIN },
			{ .fd = wfd, .events = POLLIN },
		};
		int ns = spawn_pollfds(p + 3, SPAWN_MAX_PENDING);
		if (poll(p, (nfds_t)(3 + ns), poll_timeout()) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		spawn_ready(p + 3, ns);
		if (p[2].revents)
			watch_ready();
		if (p[0].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0)
				reap_pid((pid_t)si.ssi_pid);
			reap_runs();
			walk_due = 1;
		}
		if (walk_due && now_ms() - last_walk_ms >= REAP_ALL_MS) {
			reap_all();
			last_walk_ms = now_ms();
			walk_due = 0;
		}
		if (p[1].revents) {
			ssize_t r = read(0, buf + used, MAX_LINE - used);
			if (r <= 0) {
				eof = 1;
			} else {
				used += (size_t)r;
				char *start = buf, *nl;
				while ((nl = memchr(start, '\n', used - (size_t)(start - buf)))) {
					*nl = 0;
					if (skipping)
						skipping = 0;
					else if (memchr(start, 0, (size_t)(nl - start)))
						reply_err("-", EINVAL, "invalid line");
					else
						handle(start);
					start = nl + 1;
				}
				used -= (size_t)(start - buf);
				memmove(buf, start, used);
				if (used == MAX_LINE) {
					/* over-long line: drop it up to its newline */
					reply_err("-", E2BIG, "line too long");
					used = 0;
					skipping = 1;
				}
			}
		}
		if (fflush(stdout) != 0)
			return 1;
	}
	return 0;
}
