/*
 * The native sandbox spawner of warren-hostd: starts a container sandbox's init in fresh
 * namespaces without a container runtime process per create.
 *
 * `runc run -d` starts two Go programs per sandbox (`runc run` and `runc init`), ~35 ms on the
 * 2-core machines Warren is measured on; the kernel work underneath (clone with the namespaces,
 * a dozen mounts, pivot_root, exec) is ~3 ms. This does that kernel work for the one shape of
 * container Warren makes, described by a spec the edge derives from the same OCI config it would
 * hand runc (packages/edge/src/backends/container/spawn-spec.ts):
 *
 *   root=PATH          the root file system: a mount point, or the directory the overlay goes on
 *   overlay=LOWER^UPPER^WORK   mount this overlay (LOWER colon-joined, top first) on root in the
 *                      spawn's own mount namespace: it never appears in the host's
 *   overlaydir=PATH    the directory relative LOWER entries are found in
 *   sock=PATH          a Unix socket is bound and listening here; the init gets it as fd 3
 *   log=PATH           the init's stderr (appended)
 *   ns=LIST            comma list of user,mnt,pid,ipc,uts,net,cgroup
 *   uidmap=IN:OUT:N    gidmap=IN:OUT:N
 *   layermap=IN:OUT:N  the overlay's lower layers are mounted idmapped (ids IN.. on disk seen as
 *                      OUT..) in the spawn's mount namespace: layers are stored once, in one id
 *                      range, and every sandbox sees them in its own
 *   hostname=NAME
 *   cg=DIR             a cgroup directory to create (parents too) and put the init in (repeat)
 *   cgw=FILE=VALUE     a cgroup file to write before the init runs (repeat; split at the last '=')
 *   mount=DEST^TYPE^SOURCE^FLAGS^DATA   (^ is 0x1f; FLAGS is the decimal MS_* mask) mounted
 *                      inside root, in order; DEST resolves inside root (symlinks cannot leave
 *                      it) and is created when missing. A bind with more flags than MS_BIND|MS_REC
 *                      is remounted with them, keeping the flags the kernel locks.
 *   dev=NAME           bind the host's /dev/NAME at /dev/NAME inside (repeat)
 *   link=TARGET^PATH   a symlink inside root (repeat)
 *   mask=PATH          after pivot_root: hidden (a directory under a read-only tmpfs, a file
 *                      under /dev/null); missing paths are skipped (repeat)
 *   ro=PATH            after pivot_root: remounted read-only (repeat)
 *   rlimit=RES:SOFT:HARD
 *   caps=HEX           the capability set kept (bounding, permitted, effective); all else dropped
 *   nnp=1              no_new_privs
 *   cwd=PATH  env=K=V (repeat)  arg=ARG (repeat; arg 0 is the program, a path inside root)
 *
 * The reply is the init's host pid once it has exec'd, or the step that failed and its errno.
 * The init ends up a child of warren-hostd (a subreaper), which reaps it; it is its own session,
 * so it outlives warren-hostd and the edge (a restarted edge finds it again by pid and start time).
 */
#define _GNU_SOURCE
#include "spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <limits.h>
#include <linux/openat2.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ITEMS 64
#define SEP '\x1f'

struct mnt {
	char *dest, *type, *source, *data;
	unsigned long flags;
};

struct spec {
	char *root, *sock, *log, *hostname, *cwd, *overlay, *overlaydir, *netns;
	char *uidmap, *gidmap, *layermap;
	int layerns;
	int clone_flags, cgroupns;
	char *cg[MAX_ITEMS];
	int ncg;
	char *cgw[MAX_ITEMS];
	int ncgw;
	struct mnt mounts[MAX_ITEMS];
	int nmounts;
	char *devs[MAX_ITEMS];
	int ndevs;
	char *links[MAX_ITEMS];
	int nlinks;
	char *masks[MAX_ITEMS];
	int nmasks;
	char *ros[MAX_ITEMS];
	int nros;
	struct {
		int res;
		unsigned long long soft, hard;
	} rl[MAX_ITEMS];
	int nrl;
	uint64_t caps;
	int have_caps, nnp;
	char *env[MAX_ITEMS + 1];
	int nenv;
	char *argv[MAX_ITEMS + 1];
	int nargv;
};

static int push(char **arr, int *n, char *v)
{
	if (*n >= MAX_ITEMS)
		return -1;
	arr[(*n)++] = v;
	return 0;
}

/* Splits s at each SEP into at most max parts; returns the count. */
static int split(char *s, char **parts, int max)
{
	int n = 0;
	parts[n++] = s;
	while (n < max && (s = strchr(s, SEP))) {
		*s++ = 0;
		parts[n++] = s;
	}
	return n;
}

static int parse_ns(struct spec *sp, char *list)
{
	for (char *save = NULL, *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
		if (!strcmp(t, "user"))
			sp->clone_flags |= CLONE_NEWUSER;
		else if (!strcmp(t, "mnt"))
			sp->clone_flags |= CLONE_NEWNS;
		else if (!strcmp(t, "pid"))
			sp->clone_flags |= CLONE_NEWPID;
		else if (!strcmp(t, "ipc"))
			sp->clone_flags |= CLONE_NEWIPC;
		else if (!strcmp(t, "uts"))
			sp->clone_flags |= CLONE_NEWUTS;
		else if (!strcmp(t, "net"))
			sp->clone_flags |= CLONE_NEWNET;
		else if (!strcmp(t, "cgroup"))
			sp->cgroupns = 1;
		else
			return -1;
	}
	return 0;
}

static int parse(struct spec *sp, char **f, int n, const char **bad)
{
	memset(sp, 0, sizeof *sp);
	for (int i = 0; i < n; i++) {
		char *k = f[i], *v = strchr(k, '=');
		*bad = k;
		if (!v)
			return -1;
		*v++ = 0;
		int r = 0;
		if (!strcmp(k, "root"))
			sp->root = v;
		else if (!strcmp(k, "sock"))
			sp->sock = v;
		else if (!strcmp(k, "log"))
			sp->log = v;
		else if (!strcmp(k, "hostname"))
			sp->hostname = v;
		else if (!strcmp(k, "cwd"))
			sp->cwd = v;
		else if (!strcmp(k, "overlay"))
			sp->overlay = v;
		else if (!strcmp(k, "overlaydir"))
			sp->overlaydir = v;
		else if (!strcmp(k, "uidmap"))
			sp->uidmap = v;
		else if (!strcmp(k, "gidmap"))
			sp->gidmap = v;
		else if (!strcmp(k, "layermap"))
			sp->layermap = v;
		else if (!strcmp(k, "ns"))
			r = parse_ns(sp, v);
		else if (!strcmp(k, "netns"))
			sp->netns = v;
		else if (!strcmp(k, "cg"))
			r = push(sp->cg, &sp->ncg, v);
		else if (!strcmp(k, "cgw"))
			r = strrchr(v, '=') ? push(sp->cgw, &sp->ncgw, v) : -1;
		else if (!strcmp(k, "mount")) {
			char *p[5];
			if (sp->nmounts >= MAX_ITEMS || split(v, p, 5) != 5 || p[0][0] != '/')
				return -1;
			char *end;
			struct mnt *m = &sp->mounts[sp->nmounts++];
			m->dest = p[0];
			m->type = p[1];
			m->source = p[2];
			m->flags = strtoul(p[3], &end, 10);
			m->data = p[4];
			if (*end)
				return -1;
		} else if (!strcmp(k, "dev"))
			r = strchr(v, '/') || !*v ? -1 : push(sp->devs, &sp->ndevs, v);
		else if (!strcmp(k, "link"))
			r = strchr(v, SEP) ? push(sp->links, &sp->nlinks, v) : -1;
		else if (!strcmp(k, "mask"))
			r = v[0] == '/' ? push(sp->masks, &sp->nmasks, v) : -1;
		else if (!strcmp(k, "ro"))
			r = v[0] == '/' ? push(sp->ros, &sp->nros, v) : -1;
		else if (!strcmp(k, "rlimit")) {
			if (sp->nrl >= MAX_ITEMS ||
			    sscanf(v, "%d:%llu:%llu", &sp->rl[sp->nrl].res, &sp->rl[sp->nrl].soft, &sp->rl[sp->nrl].hard) != 3)
				return -1;
			sp->nrl++;
		} else if (!strcmp(k, "caps")) {
			char *end;
			sp->caps = strtoull(v, &end, 16);
			sp->have_caps = 1;
			r = *end || !*v ? -1 : 0;
		} else if (!strcmp(k, "nnp"))
			sp->nnp = !strcmp(v, "1");
		else if (!strcmp(k, "env")) {
			v[-1] = '=';
			r = push(sp->env, &sp->nenv, k + 4);
		} else if (!strcmp(k, "arg"))
			r = push(sp->argv, &sp->nargv, v);
		else
			return -1;
		if (r < 0)
			return -1;
	}
	*bad = "root, sock, log, uidmap, gidmap, arg and cwd are required; ns must include user, mnt and pid";
	if (!sp->root || !sp->sock || !sp->log || !sp->uidmap || !sp->gidmap || !sp->cwd || sp->nargv == 0 ||
	    (sp->clone_flags & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)) != (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID) ||
	    sp->argv[0][0] != '/')
		return -1;
	*bad = "netns (join a network namespace) and a new one (ns=net) exclude each other";
	if (sp->netns && (sp->clone_flags & CLONE_NEWNET))
		return -1;
	sp->env[sp->nenv] = NULL;
	sp->argv[sp->nargv] = NULL;
	return 0;
}

/* ---- helpers run in the parent (warren-hostd) ---- */

static int write_file(const char *path, const char *data)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = strlen(data);
	ssize_t w = write(fd, data, len);
	int e = errno;
	close(fd);
	if (w != (ssize_t)len) {
		errno = w < 0 ? e : EIO;
		return -1;
	}
	return 0;
}

static int mkdir_p(const char *path)
{
	if (mkdir(path, 0755) == 0 || errno == EEXIST)
		return 0;
	if (errno != ENOENT)
		return -1;
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(buf, path);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -1;
		*p = '/';
	}
	return mkdir(buf, 0755) < 0 && errno != EEXIST ? -1 : 0;
}

/* "IN:OUT:N" → "IN OUT N\n" into /proc/PID/FILE */
static int write_map(pid_t pid, const char *file, const char *map)
{
	unsigned long a, b, c;
	char path[64], line[96];
	if (sscanf(map, "%lu:%lu:%lu", &a, &b, &c) != 3) {
		errno = EINVAL;
		return -1;
	}
	snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
	snprintf(line, sizeof line, "%lu %lu %lu\n", a, b, c);
	return write_file(path, line);
}

int idmap_userns(const char *map)
{
	int pp[2];
	if (pipe2(pp, O_CLOEXEC) < 0)
		return -1;
	/* fork-like clone into a new user namespace: the child only holds it until the maps are written
	 * and the namespace is open here. */
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | SIGCHLD), NULL, NULL, NULL, 0UL);
	if (pid == 0) {
		char c;
		close(pp[1]);
		while (read(pp[0], &c, 1) < 0 && errno == EINTR) {
		}
		_exit(0);
	}
	int e = errno, fd = -1;
	close(pp[0]);
	if (pid > 0) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
		if (write_map(pid, "uid_map", map) == 0 && write_map(pid, "gid_map", map) == 0)
			fd = open(path, O_RDONLY | O_CLOEXEC);
		e = errno;
	}
	close(pp[1]);
	if (pid > 0)
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
		}
	errno = e;
	return fd;
}

/*
 * Making a user namespace is a clone and two map writes (~0.2 ms here, more from a larger
 * process); sandboxes reuse ranges, so the namespace of each recent map is kept (least recently
 * used one closed first). Made in warren-hostd itself, so every spawn forked later inherits it.
 */
#define USERNS_CACHE 512
static struct {
	char map[48];
	int fd;
	unsigned long used;
} userns_cache[USERNS_CACHE];
static unsigned long userns_clock;

int idmap_userns_cached(const char *map)
{
	int lru = 0;
	if (strlen(map) >= sizeof userns_cache[0].map) {
		errno = EINVAL;
		return -1;
	}
	for (int i = 0; i < USERNS_CACHE; i++) {
		if (userns_cache[i].used && !strcmp(userns_cache[i].map, map)) {
			userns_cache[i].used = ++userns_clock;
			return userns_cache[i].fd;
		}
		if (userns_cache[i].used < userns_cache[lru].used)
			lru = i;
	}
	int fd = idmap_userns(map);
	if (fd < 0)
		return -1;
	if (userns_cache[lru].used)
		close(userns_cache[lru].fd);
	strcpy(userns_cache[lru].map, map);
	userns_cache[lru].fd = fd;
	userns_cache[lru].used = ++userns_clock;
	return fd;
}

int idmap_mount(const char *src, const char *target, int userns)
{
	int t = open_tree(AT_FDCWD, src, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	if (t < 0)
		return -1;
	struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOSUID, .userns_fd = (uint64_t)userns };
	int r = mount_setattr(t, "", AT_EMPTY_PATH, &a, sizeof a);
	if (r == 0)
		r = move_mount(t, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH);
	int e = errno;
	close(t);
	errno = e;
	return r;
}

/* ---- the child: from clone to exec ---- */

static int report_fd = -1;

__attribute__((noreturn)) static void fail(const char *what, const char *arg)
{
	char msg[512];
	int e = errno;
	int n = snprintf(msg, sizeof msg, "%d\t%s%s%s: %s", e, what, arg ? " " : "", arg ? arg : "", strerror(e));
	if (n > 0 && write(report_fd, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) {
		/* the parent learns of the failure from the exit anyway */
	}
	_exit(127);
}

static int open_in(int rootfd, const char *path, int flags)
{
	struct open_how how = {
		.flags = (uint64_t)(flags | O_CLOEXEC),
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
	};
	return (int)syscall(SYS_openat2, rootfd, path, &how, sizeof how);
}

/*
 * An O_PATH fd for path inside root, creating it (and its parents as directories) when missing:
 * as a directory, or as an empty file when file is set. Symlinks on the way resolve inside root.
 */
static int ensure_in(int rootfd, const char *path, int file)
{
	int fd = open_in(rootfd, path, O_PATH);
	if (fd >= 0 || errno != ENOENT)
		return fd;
	char buf[PATH_MAX];
	if (strlen(path) >= sizeof buf) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(buf, path);
	char *slash = strrchr(buf, '/');
	const char *base = slash + 1;
	int parent;
	if (slash == buf) {
		parent = open_in(rootfd, "/", O_PATH | O_DIRECTORY);
	} else {
		*slash = 0;
		int p = ensure_in(rootfd, buf, 0);
		if (p < 0)
			return -1;
		close(p);
		parent = open_in(rootfd, buf, O_PATH | O_DIRECTORY);
	}
	if (parent < 0)
		return -1;
	int r;
	if (file) {
		/* O_PATH dirfds work for *at calls. */
		int f = openat(parent, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
		r = f;
		if (f >= 0)
			close(f);
	} else {
		r = mkdirat(parent, base, 0755);
	}
	close(parent);
	if (r < 0 && errno != EEXIST)
		return -1;
	return open_in(rootfd, path, O_PATH);
}

static unsigned long locked_flags(const char *path)
{
	struct statvfs s;
	unsigned long f = 0;
	if (statvfs(path, &s) < 0)
		return 0;
	if (s.f_flag & ST_NOSUID)
		f |= MS_NOSUID;
	if (s.f_flag & ST_NODEV)
		f |= MS_NODEV;
	if (s.f_flag & ST_NOEXEC)
		f |= MS_NOEXEC;
	if (s.f_flag & ST_RDONLY)
		f |= MS_RDONLY;
	if (s.f_flag & ST_NODIRATIME)
		f |= MS_NODIRATIME;
	if (s.f_flag & ST_NOATIME)
		f |= MS_NOATIME;
	else if (s.f_flag & ST_RELATIME)
		f |= MS_RELATIME;
	else
		f |= MS_STRICTATIME;
	return f;
}

static void do_mount(int rootfd, struct mnt *m)
{
	int is_bind = (m->flags & MS_BIND) != 0;
	int file = 0;
	if (is_bind) {
		struct stat st;
		if (stat(m->source, &st) < 0)
			fail("mount source", m->source);
		file = !S_ISDIR(st.st_mode);
	}
	int fd = ensure_in(rootfd, m->dest, file);
	if (fd < 0)
		fail("mount point", m->dest);
	char target[64];
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	unsigned long first = is_bind ? m->flags & (MS_BIND | MS_REC) : m->flags;
	if (mount(m->source, target, m->type, first, *m->data ? m->data : NULL) < 0)
		fail("mount", m->dest);
	close(fd);
	if (is_bind && (m->flags & ~(MS_BIND | MS_REC))) {
		/* The fd names the covered directory; look the path up again to reach the new mount. */
		fd = open_in(rootfd, m->dest, O_PATH);
		if (fd < 0)
			fail("mount point", m->dest);
		snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
		unsigned long f = MS_BIND | MS_REMOUNT | (m->flags & ~(MS_BIND | MS_REC)) | locked_flags(target);
		if (f & (MS_NOATIME | MS_STRICTATIME))
			f &= ~MS_RELATIME;
		if (mount(NULL, target, NULL, f, NULL) < 0)
			fail("remount", m->dest);
		close(fd);
	}
}

static void bind_dev(int rootfd, const char *name)
{
	char host[PATH_MAX], inside[PATH_MAX], target[64];
	snprintf(host, sizeof host, "/dev/%s", name);
	snprintf(inside, sizeof inside, "/dev/%s", name);
	int fd = ensure_in(rootfd, inside, 1);
	if (fd < 0)
		fail("device node", inside);
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	if (mount(host, target, NULL, MS_BIND, NULL) < 0)
		fail("bind device", host);
	close(fd);
}

static void make_link(int rootfd, char *spec)
{
	char *p[2] = { spec, NULL };
	if (split(spec, p, 2) != 2)
		fail("symlink", spec);
	char buf[PATH_MAX];
	if (p[1][0] != '/' || strlen(p[1]) >= sizeof buf)
		fail("symlink", p[1]);
	strcpy(buf, p[1]);
	char *slash = strrchr(buf, '/');
	*slash = 0;
	int parent = ensure_in(rootfd, *buf ? buf : "/", 0);
	if (parent < 0)
		fail("symlink parent", p[1]);
	if (symlinkat(p[0], parent, slash + 1) < 0 && errno != EEXIST)
		fail("symlink", p[1]);
	close(parent);
}

static void mask(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return;
		fail("mask", path);
	}
	int r = S_ISDIR(st.st_mode) ? mount("tmpfs", path, "tmpfs", MS_RDONLY, NULL)
				    : mount("/dev/null", path, NULL, MS_BIND, NULL);
	if (r < 0 && errno != ENOENT)
		fail("mask", path);
}

static void readonly(const char *path)
{
	if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0) {
		if (errno == ENOENT)
			return;
		fail("read-only bind", path);
	}
	if (mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags(path), NULL) < 0)
		fail("read-only remount", path);
}

static void set_caps(uint64_t keep)
{
	for (int cap = 0; cap <= 63; cap++) {
		if (keep & (1ULL << cap))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break; /* past the kernel's last capability */
			fail("drop capability", NULL);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		fail("clear ambient capabilities", NULL);
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2] = {
		{ .effective = (uint32_t)keep, .permitted = (uint32_t)keep, .inheritable = 0 },
		{ .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32), .inheritable = 0 },
	};
	if (syscall(SYS_capset, &h, d) < 0)
		fail("capset", NULL);
}

__attribute__((noreturn)) static void child(struct spec *sp, int sync, int lfd, int nul, int logfd)
{
	report_fd = sync;
	char go;
	if (read(sync, &go, 1) != 1)
		_exit(127); /* the parent gave up */
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		fail("become root of the user namespace", NULL);
	/* A network namespace of our own (no prepared one joined) has loopback, up. */
	if (sp->clone_flags & CLONE_NEWNET) {
		int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct ifreq ifr = { 0 };
		strcpy(ifr.ifr_name, "lo");
		if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
			fail("loopback", NULL);
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			fail("loopback up", NULL);
		close(s);
	}
	/* After the parent put us in our cgroups, so that they are the namespace's root. */
	if (sp->cgroupns && unshare(CLONE_NEWCGROUP) < 0)
		fail("cgroup namespace", NULL);
	/* Mounts copied into a new user namespace are locked, and pivot_root refuses a locked new
	 * root: bind it onto itself for a mount of our own. */
	if (mount(sp->root, sp->root, NULL, MS_BIND | MS_REC, NULL) < 0)
		fail("bind root", sp->root);
	int rootfd = open(sp->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		fail("root", sp->root);
	for (int i = 0; i < sp->nmounts; i++)
		/* With a joined network namespace, stage 1 mounted sysfs already (see there). */
		if (!(sp->netns && !strcmp(sp->mounts[i].type, "sysfs")))
			do_mount(rootfd, &sp->mounts[i]);
	for (int i = 0; i < sp->ndevs; i++)
		bind_dev(rootfd, sp->devs[i]);
	for (int i = 0; i < sp->nlinks; i++)
		make_link(rootfd, sp->links[i]);
	if (fchdir(rootfd) < 0)
		fail("chdir root", sp->root);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		fail("pivot_root", sp->root);
	if (umount2(".", MNT_DETACH) < 0)
		fail("detach the host's root", NULL);
	if (chdir("/") < 0)
		fail("chdir /", NULL);
	close(rootfd);
	for (int i = 0; i < sp->nmasks; i++)
		mask(sp->masks[i]);
	for (int i = 0; i < sp->nros; i++)
		readonly(sp->ros[i]);
	if (sp->hostname && sethostname(sp->hostname, strlen(sp->hostname)) < 0)
		fail("hostname", sp->hostname);
	for (int i = 0; i < sp->nrl; i++) {
		struct rlimit r = { .rlim_cur = sp->rl[i].soft, .rlim_max = sp->rl[i].hard };
		if (setrlimit(sp->rl[i].res, &r) < 0)
			fail("rlimit", NULL);
	}
	if (setsid() < 0)
		fail("setsid", NULL);
	if (chdir(sp->cwd) < 0)
		fail("cwd", sp->cwd);
	/* stdio and fd 3; every other fd (the report socket included) closes at exec. */
	if (dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(logfd, 2) < 0)
		fail("stdio", NULL);
	if (lfd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(lfd, 3) < 0)
		fail("init socket", NULL);
	if (syscall(SYS_close_range, 4u, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		fail("close_range", NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (sp->have_caps)
		set_caps(sp->caps);
	if (sp->nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		fail("no_new_privs", NULL);
	execve(sp->argv[0], sp->argv, sp->env);
	fail("exec", sp->argv[0]);
}

/* Each lower layer of an overlay spec (LOWER^UPPER^WORK, LOWER colon-joined) mounted idmapped over
 * itself, in this (private) mount namespace only. */
static void idmap_lowers(const char *spec, int u)
{
	static char buf[PATH_MAX * 64];
	snprintf(buf, sizeof buf, "%s", spec);
	char *end = strchr(buf, SEP);
	if (end)
		*end = 0;
	for (char *save = NULL, *l = strtok_r(buf, ":", &save); l; l = strtok_r(NULL, ":", &save))
		if (idmap_mount(l, l, u) < 0)
			fail("idmapped layer", l);
}

/* ---- stage 1: a private mount namespace for the root, then the init ---- */

/*
 * The overlay through the new mount API: one fsconfig per lower layer ("lowerdir+"), so the
 * number of layers is not bounded by one page of mount options. xino: the layers are on other
 * file systems than the writable one, and without it a directory listing's inode numbers
 * differ from what stat says of the same files (programs that compare them break). Returns -1 with errno ENOSYS or
 * EINVAL when this kernel lacks it (the caller falls back to mount(2)).
 */
static int overlay_fsopen(char *lower, const char *upper, const char *work, const char *target)
{
	int fs = fsopen("overlay", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -1;
	int ok = 1;
	for (char *save = NULL, *l = strtok_r(lower, ":", &save); ok && l; l = strtok_r(NULL, ":", &save))
		ok = fsconfig(fs, FSCONFIG_SET_STRING, "lowerdir+", l, 0) == 0;
	if (ok)
		ok = fsconfig(fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) == 0 &&
		     fsconfig(fs, FSCONFIG_SET_STRING, "workdir", work, 0) == 0 &&
		     fsconfig(fs, FSCONFIG_SET_STRING, "xino", "on", 0) == 0 &&
		     fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0;
	int m = ok ? fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NODEV) : -1;
	int e = errno;
	close(fs);
	if (m < 0) {
		errno = e;
		return -1;
	}
	int r = move_mount(m, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH);
	e = errno;
	close(m);
	errno = e;
	return r;
}

static void mount_overlay(const char *spec, const char *target)
{
	static char buf[PATH_MAX * 64], opts[PATH_MAX * 64];
	char *p[3];
	if (strlen(spec) >= sizeof buf) {
		errno = ENAMETOOLONG;
		fail("overlay", NULL);
	}
	strcpy(buf, spec);
	if (split(buf, p, 3) != 3 || strchr(spec, ',')) {
		errno = EINVAL;
		fail("overlay", spec);
	}
	int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,xino=on", p[0], p[1], p[2]);
	if (n < 0 || n >= (int)sizeof opts) {
		errno = E2BIG;
		fail("overlay", NULL);
	}
	if (overlay_fsopen(p[0], p[1], p[2], target) == 0)
		return;
	if (errno != ENOSYS && errno != EINVAL)
		fail("overlay", target);
	/* Older kernels: one page of options. nodev: a device node in an image layer opens nothing
	 * (the devices cgroup denies it too). */
	long page = sysconf(_SC_PAGESIZE);
	if (n >= (page > 0 ? page : 4096)) {
		errno = E2BIG;
		fail("overlay (too many layers for this kernel)", NULL);
	}
	if (mount("overlay", target, "overlay", MS_NODEV, opts) < 0)
		fail("overlay", target);
}

/*
 * Runs in a short-lived process between warren-hostd and the init, so warren-hostd serves other
 * requests (and starts other sandboxes) meanwhile. It makes the cgroups and the init socket; its own mount namespace gets
 * the sandbox's overlay, so the host's mount table never grows with sandboxes (a new mount
 * namespace copies the whole table: with the overlays on the host, every create and delete cost
 * grew with the number of sandboxes). Clones the init from there, puts it in its cgroups, writes
 * its id maps, lets it go, and reports "PID" or the failure on rep; then exits, and the init is
 * re-parented to warren-hostd (a child subreaper).
 */
__attribute__((noreturn)) static void stage1(struct spec *sp, int rep)
{
	report_fd = rep;
	for (int i = 0; i < sp->ncg; i++)
		if (mkdir_p(sp->cg[i]) < 0)
			fail("cgroup", sp->cg[i]);
	for (int i = 0; i < sp->ncgw; i++) {
		char *eq = strrchr(sp->cgw[i], '=');
		*eq = 0;
		if (write_file(sp->cgw[i], eq + 1) < 0)
			fail("cgroup write", sp->cgw[i]);
		*eq = '=';
	}
	int lfd = listen_at(sp->sock);
	if (lfd < 0)
		fail("init socket", sp->sock);
	int logfd = open(sp->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		fail("log", sp->log);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul < 0)
		fail("/dev/null", NULL);
	if (unshare(CLONE_NEWNS) < 0)
		fail("mount namespace", NULL);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		fail("make mounts private", NULL);
	/* Relative lower dirs resolve from overlaydir: mount options must fit in one page. */
	if (sp->overlaydir && chdir(sp->overlaydir) < 0)
		fail("overlay dir", sp->overlaydir);
	if (sp->overlay && sp->layermap)
		idmap_lowers(sp->overlay, sp->layerns);
	if (sp->overlay)
		mount_overlay(sp->overlay, sp->root);
	/* A network namespace the edge prepared (veth, addresses): owned by the host's user
	 * namespace, so root in the sandbox cannot reconfigure it. */
	if (sp->netns) {
		int nfd = open(sp->netns, O_RDONLY | O_CLOEXEC);
		if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0)
			fail("join network namespace", sp->netns);
		close(nfd);
		/* sysfs may only be mounted by a user namespace that owns the network namespace: the
		 * sandbox's does not own this one, so its /sys (showing this namespace's devices) is
		 * mounted here, read-only, and reaches the sandbox locked under its root. */
		if (!sp->root || !sp->overlay) {
			errno = EINVAL;
			fail("netns without an overlay root", NULL);
		}
		char sys[PATH_MAX];
		snprintf(sys, sizeof sys, "%s/sys", sp->root);
		if (mkdir(sys, 0555) < 0 && errno != EEXIST)
			fail("mount point", sys);
		if (mount("sysfs", sys, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			fail("sysfs", sys);
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		fail("socketpair", NULL);
	/* fork-like clone (no new stack): the child returns here with its own copy of memory. */
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)(sp->clone_flags | SIGCHLD), NULL, NULL, NULL, 0UL);
	if (pid < 0)
		fail("clone", NULL);
	if (pid == 0) {
		close(sv[0]);
		close(rep);
		child(sp, sv[1], lfd, nul, logfd);
	}
	close(sv[1]);
	char pidstr[16], path[PATH_MAX + 32];
	snprintf(pidstr, sizeof pidstr, "%d", pid);
	for (int i = 0; i < sp->ncg; i++) {
		snprintf(path, sizeof path, "%s/cgroup.procs", sp->cg[i]);
		if (write_file(path, pidstr) < 0) {
			kill(pid, SIGKILL);
			fail("join cgroup", sp->cg[i]);
		}
	}
	if (write_map(pid, "uid_map", sp->uidmap) < 0 || write_map(pid, "gid_map", sp->gidmap) < 0) {
		kill(pid, SIGKILL);
		fail("id map", NULL);
	}
	if (write(sv[0], "g", 1) != 1) {
		kill(pid, SIGKILL);
		fail("start", NULL);
	}
	/* EOF: the init's report socket closed at exec. A message: the step that failed. */
	struct pollfd p = { .fd = sv[0], .events = POLLIN };
	int pr;
	do
		pr = poll(&p, 1, 10000);
	while (pr < 0 && errno == EINTR);
	if (pr == 0) {
		kill(pid, SIGKILL);
		errno = ETIMEDOUT;
		fail("start", NULL);
	}
	char msg[512];
	ssize_t r = read(sv[0], msg, sizeof msg);
	if (r > 0) {
		kill(pid, SIGKILL);
		if (write(rep, msg, (size_t)r) < 0)
			_exit(1);
		_exit(0);
	}
	if (dprintf(rep, "ok %d", pid) < 0)
		_exit(1);
	_exit(0);
}

/* ---- the request: warren-hostd forks stage 1 and answers when it reports ---- */

struct pending {
	int fd;
	pid_t pid;
	char tag[32];
};

static struct pending pending[SPAWN_MAX_PENDING];
static int npending;

void spawn_start(const char *tag, char **f, int n)
{
	static struct spec sp;
	const char *bad = "";
	if (parse(&sp, f, n, &bad) < 0) {
		printf("%s\terr\t%d\tspawn: bad field: %s\n", tag, EINVAL, bad);
		return;
	}
	if (npending == SPAWN_MAX_PENDING || strlen(tag) >= sizeof pending[0].tag) {
		printf("%s\terr\t%d\tspawn: too many at once\n", tag, EAGAIN);
		return;
	}
	if (sp.layermap && (sp.layerns = idmap_userns_cached(sp.layermap)) < 0) {
		printf("%s\terr\t%d\tspawn: layer id map %s: %s\n", tag, errno, sp.layermap, strerror(errno));
		return;
	}
	int rep[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, rep) < 0) {
		printf("%s\terr\t%d\tspawn: socketpair: %s\n", tag, errno, strerror(errno));
		return;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(rep[0]);
		stage1(&sp, rep[1]);
	}
	int e = errno;
	close(rep[1]);
	if (pid < 0) {
		close(rep[0]);
		printf("%s\terr\t%d\tspawn: fork: %s\n", tag, e, strerror(e));
		return;
	}
	struct pending *p = &pending[npending++];
	p->fd = rep[0];
	p->pid = pid;
	strcpy(p->tag, tag);
}

int spawn_pollfds(struct pollfd *p, int max)
{
	int n = 0;
	for (int i = 0; i < npending && n < max; i++, n++)
		p[n] = (struct pollfd){ .fd = pending[i].fd, .events = POLLIN };
	return n;
}

/* Stage 1 reports "ok PID" or "ERRNO<TAB>MESSAGE", then exits; EOF alone: it died. */
void spawn_ready(struct pollfd *p, int n)
{
	for (int k = n - 1; k >= 0; k--) {
		if (!p[k].revents)
			continue;
		int i;
		for (i = 0; i < npending && pending[i].fd != p[k].fd; i++) {
		}
		if (i == npending)
			continue;
		struct pending *sp = &pending[i];
		char msg[512];
		ssize_t r = read(sp->fd, msg, sizeof msg - 1);
		int e = errno;
		if (r < 0 && e == EAGAIN)
			continue;
		close(sp->fd);
		if (r > 0) {
			msg[r] = 0;
			if (!strncmp(msg, "ok ", 3))
				printf("%s\tok\t%s\n", sp->tag, msg + 3);
			else
				printf("%s\terr\t%s\n", sp->tag, msg);
		} else {
			printf("%s\terr\t%d\tspawn: the spawner died\n", sp->tag, EPIPE);
		}
		*sp = pending[--npending];
	}
}

int spawn_busy(void)
{
	return npending;
}
