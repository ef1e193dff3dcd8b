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
 * Replies: "TAG ok[ TAB STATUS]" or "TAG err TAB ERRNO TAB MESSAGE". Exits 0 on EOF of stdin,
 * after its running children have exited.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <limits.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ctype.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <linux/btrfs.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "spawn.h"

#define MAX_LINE (64 * 1024)
#define MAX_FIELDS 256
#define MAX_CHILDREN 4096

struct child {
	pid_t pid;
	char tag[32];
};

static struct child children[MAX_CHILDREN];
static int nchildren;

static void reply_ok(const char *tag)
{
	printf("%s\tok\n", tag);
}

static void reply_err(const char *tag, int e, const char *what)
{
	printf("%s\terr\t%d\t%s: %s\n", tag, e, what, strerror(e));
}

static int has_bad(const char *s, const char *bad)
{
	return strpbrk(s, bad) != NULL;
}

static void do_overlay(const char *tag, char **f)
{
	const char *lower = f[0], *upper = f[1], *work = f[2], *target = f[3];
	/* ',' separates mount options; reject rather than mis-parse. */
	if (!*lower || !*upper || !*work || !*target || has_bad(lower, ",") || has_bad(upper, ",:") ||
	    has_bad(work, ",:")) {
		reply_err(tag, EINVAL, "overlay");
		return;
	}
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0)
		page = 4096;
	size_t need = strlen(lower) + strlen(upper) + strlen(work) + 64;
	char *opts = malloc(need);
	if (!opts) {
		reply_err(tag, ENOMEM, "overlay");
		return;
	}
	int n = snprintf(opts, need, "lowerdir=%s,upperdir=%s,workdir=%s,xino=on", lower, upper, work);
	if (n < 0 || (long)n >= page) {
		free(opts);
		reply_err(tag, E2BIG, "overlay");
		return;
	}
	if (mount("overlay", target, "overlay", 0, opts) < 0)
		reply_err(tag, errno, "overlay");
	else
		reply_ok(tag);
	free(opts);
}

static void do_idmap(const char *tag, char **f)
{
	if (!*f[0] || !*f[1]) {
		reply_err(tag, EINVAL, "idmap");
		return;
	}
	int u = idmap_userns_cached(f[2]);
	if (u < 0) {
		reply_err(tag, errno, "idmap: user namespace");
		return;
	}
	if (idmap_mount(f[0], f[1], u) < 0)
		reply_err(tag, errno, "idmap");
	else
		reply_ok(tag);
}

static void do_erofs(const char *tag, char **f, int n)
{
	char opts[PATH_MAX + 16];
	if (!*f[0] || !*f[1] || (n == 3 && (!*f[2] || strchr(f[2], ',') || strlen(f[2]) >= PATH_MAX))) {
		reply_err(tag, EINVAL, "erofs");
		return;
	}
	if (n == 3)
		snprintf(opts, sizeof opts, "device=%s", f[2]);
	if (mount(f[0], f[1], "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, n == 3 ? opts : NULL) < 0)
		reply_err(tag, errno, "erofs");
	else
		reply_ok(tag);
}

static void do_tmpfs(const char *tag, char **f)
{
	if (!*f[0]) {
		reply_err(tag, EINVAL, "tmpfs");
		return;
	}
	if (mount("tmpfs", f[0], "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, f[1]) < 0)
		reply_err(tag, errno, "tmpfs");
	else
		reply_ok(tag);
}

/* Hex-decodes s in place; returns the length, or -1 when it is not even-length hex. */
static long unhex(char *s)
{
	size_t n = strlen(s);
	if (n % 2)
		return -1;
	for (size_t i = 0; i < n / 2; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1 || !isxdigit((unsigned char)s[2 * i]) || !isxdigit((unsigned char)s[2 * i + 1]))
			return -1;
		s[i] = (char)v;
	}
	s[n / 2] = 0;
	return (long)(n / 2);
}

static void do_mknod(const char *tag, char **f)
{
	char *end;
	long plen = unhex(f[0]);
	unsigned long mode = strtoul(f[2], &end, 8);
	unsigned long maj = strtoul(f[3], NULL, 10), min = strtoul(f[4], NULL, 10);
	mode_t type = !strcmp(f[1], "c") ? S_IFCHR : !strcmp(f[1], "b") ? S_IFBLK : !strcmp(f[1], "p") ? S_IFIFO : 0;
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || *end || mode > 07777 || !type) {
		reply_err(tag, EINVAL, "mknod");
		return;
	}
	if (mknod(f[0], type | (mode_t)mode, makedev(maj, min)) < 0)
		reply_err(tag, errno, "mknod");
	else
		reply_ok(tag);
}

static void do_xattr(const char *tag, char **f)
{
	long plen = unhex(f[0]);
	long vlen = unhex(f[2]);
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || vlen < 0 || !*f[1]) {
		reply_err(tag, EINVAL, "xattr");
		return;
	}
	if (lsetxattr(f[0], f[1], f[2], (size_t)vlen, 0) < 0)
		reply_err(tag, errno, "xattr");
	else
		reply_ok(tag);
}

/* A name for a subvolume: one path component. */
static int component_ok(const char *n)
{
	return *n && strlen(n) < BTRFS_PATH_NAME_MAX && !strchr(n, '/') && strcmp(n, ".") && strcmp(n, "..");
}

/*
 * "subvol DIRHEX NAME KIB": a btrfs subvolume NAME in DIR, its space (data and metadata) limited
 * to KIB by a qgroup the file system enforces (quotas must be enabled on it).
 */
static void do_subvol(const char *tag, char **f)
{
	long plen = unhex(f[0]);
	char *end;
	unsigned long long kib = strtoull(f[2], &end, 10);
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || !component_ok(f[1]) || *end || !kib) {
		reply_err(tag, EINVAL, "subvol");
		return;
	}
	int dfd = open(f[0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		reply_err(tag, errno, "subvol: open");
		return;
	}
	struct btrfs_ioctl_vol_args va = { 0 };
	strcpy(va.name, f[1]);
	if (ioctl(dfd, BTRFS_IOC_SUBVOL_CREATE, &va) < 0) {
		reply_err(tag, errno, "subvol: create");
		close(dfd);
		return;
	}
	int sfd = openat(dfd, f[1], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct btrfs_ioctl_qgroup_limit_args la = { 0 }; /* qgroupid 0: the subvolume of the fd */
	la.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
	la.lim.max_rfer = kib * 1024;
	if (sfd < 0 || ioctl(sfd, BTRFS_IOC_QGROUP_LIMIT, &la) < 0) {
		int e = errno;
		ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &va);
		reply_err(tag, e, "subvol: limit");
	} else {
		reply_ok(tag);
	}
	if (sfd >= 0)
		close(sfd);
	close(dfd);
}

/* "subvol-delete DIRHEX NAME": the subvolume and everything in it, at once. */
static void do_subvol_delete(const char *tag, char **f)
{
	long plen = unhex(f[0]);
	if (plen <= 0 || (long)strlen(f[0]) != plen || f[0][0] != '/' || !component_ok(f[1])) {
		reply_err(tag, EINVAL, "subvol-delete");
		return;
	}
	int dfd = open(f[0], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		reply_err(tag, errno, "subvol-delete: open");
		return;
	}
	struct btrfs_ioctl_vol_args va = { 0 };
	strcpy(va.name, f[1]);
	if (ioctl(dfd, BTRFS_IOC_SNAP_DESTROY, &va) < 0 && errno != ENOENT)
		reply_err(tag, errno, "subvol-delete");
	else
		reply_ok(tag);
	close(dfd);
}

static void do_umount(const char *tag, char **f)
{
	if (!*f[0]) {
		reply_err(tag, EINVAL, "umount");
		return;
	}
	if (umount2(f[0], MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		reply_err(tag, errno, "umount");
	else
		reply_ok(tag);
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

static void reap(void)
{
	int status;
	pid_t pid;
	while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
		for (int i = 0; i < nchildren; i++) {
			if (children[i].pid != pid)
				continue;
			int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
			printf("%s\tok\t%d\n", children[i].tag, code);
			children[i] = children[--nchildren];
			break;
		}
	}
}

/* The network namespace this helper lives in, to come back to after making one. */
static int host_netns = -1;
#define MAX_NETNS 65536
static unsigned char netns_held[MAX_NETNS];

static int write_sysctl(const char *path, const char *value)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, value, strlen(value));
	close(fd);
	return w < 0 ? -1 : 0;
}

/*
 * Sysctls of a sandbox's network namespace: root inside has no capability over a namespace the
 * host made, so low ports and ping sockets are opened to every uid; no IPv6 on interfaces that
 * come later (the veth).
 */
static const char *const NETNS_SYSCTLS[][2] = {
	{ "/proc/sys/net/ipv4/ip_unprivileged_port_start", "0" },
	{ "/proc/sys/net/ipv4/ping_group_range", "0 2147483647" },
	{ "/proc/sys/net/ipv6/conf/default/disable_ipv6", "1" },
};

static int setup_netns(void)
{
	for (size_t i = 0; i < sizeof NETNS_SYSCTLS / sizeof NETNS_SYSCTLS[0]; i++)
		if (write_sysctl(NETNS_SYSCTLS[i][0], NETNS_SYSCTLS[i][1]) < 0 && errno != ENOENT)
			return -1;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	struct ifreq ifr = { 0 };
	strcpy(ifr.ifr_name, "lo");
	int r = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (r == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	int e = errno;
	close(s);
	errno = e;
	return r;
}

static void do_netns(const char *tag)
{
	if (host_netns < 0 && (host_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
		reply_err(tag, errno, "netns: own namespace");
		return;
	}
	if (unshare(CLONE_NEWNET) < 0) {
		reply_err(tag, errno, "netns: unshare");
		return;
	}
	int fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	int e = fd < 0 ? errno : 0;
	if (fd >= 0 && setup_netns() < 0) {
		e = errno;
		close(fd);
		fd = -1;
	}
	if (setns(host_netns, CLONE_NEWNET) < 0) {
		/* Stuck in the wrong namespace: nothing this helper does after could be trusted. */
		perror("warren-hostd: back to the host network namespace");
		exit(1);
	}
	if (fd < 0) {
		reply_err(tag, e, "netns");
		return;
	}
	if (fd >= MAX_NETNS) {
		close(fd);
		reply_err(tag, EMFILE, "netns");
		return;
	}
	netns_held[fd] = 1;
	printf("%s\tok\t%d\n", tag, fd);
}

static void do_netns_close(const char *tag, char **f)
{
	char *end;
	long fd = strtol(f[0], &end, 10);
	if (*end || fd < 0 || fd >= MAX_NETNS || !netns_held[fd]) {
		reply_err(tag, EBADF, "netns-close");
		return;
	}
	netns_held[fd] = 0;
	close((int)fd);
	reply_ok(tag);
}

static void do_sysfs(const char *tag, char **f)
{
	if (host_netns < 0 && (host_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0) {
		reply_err(tag, errno, "sysfs: own namespace");
		return;
	}
	int nfd = open(f[0], O_RDONLY | O_CLOEXEC);
	if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0) {
		reply_err(tag, errno, "sysfs: join network namespace");
		if (nfd >= 0)
			close(nfd);
		return;
	}
	close(nfd);
	int r = mount("sysfs", f[1], "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	int e = errno;
	if (setns(host_netns, CLONE_NEWNET) < 0) {
		perror("warren-hostd: back to the host network namespace");
		exit(1);
	}
	if (r < 0)
		reply_err(tag, e, "sysfs");
	else
		reply_ok(tag);
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
	else if (!strcmp(cmd, "subvol") && na == 3)
		do_subvol(tag, a);
	else if (!strcmp(cmd, "subvol-delete") && na == 2)
		do_subvol_delete(tag, a);
	else if (!strcmp(cmd, "umount") && na == 1)
		do_umount(tag, a);
	else if (!strcmp(cmd, "netns") && na == 0)
		do_netns(tag);
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
	if (sfd < 0)
		return 1;
	static char buf[MAX_LINE + 1];
	size_t used = 0;
	int eof = 0, skipping = 0;
	while (!eof || nchildren > 0 || spawn_busy() > 0) {
		struct pollfd p[2 + SPAWN_MAX_PENDING] = { { .fd = sfd, .events = POLLIN }, { .fd = eof ? -1 : 0, .events = POLLIN } };
		int ns = spawn_pollfds(p + 2, SPAWN_MAX_PENDING);
		if (poll(p, (nfds_t)(2 + ns), -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		spawn_ready(p + 2, ns);
		if (p[0].revents) {
			struct signalfd_siginfo si;
			while (read(sfd, &si, sizeof si) > 0) {
			}
			reap();
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
