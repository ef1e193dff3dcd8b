
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
 *   uidmap=IN:OUT:N    gidmap=IN:OUT:N   (OUT >= 1 in these and layermap: never the host's root)
 *   layermap=IN:OUT:N  the overlay's lower layers are mounted idmapped (ids IN.. on disk seen as
 *                      OUT..) in the spawn's mount namespace: layers are stored once, in one id
 *                      range, and every sandbox sees them in its own
 *   hostname=NAME
 *   cg=DIR             a cgroup directory to create (parents too) and put the init in (repeat;
 *                      under /sys/fs/cgroup/HIERARCHY/, below its root, no "..")
 *   cgw=FILE=VALUE     a cgroup file to write before the init runs (repeat; split at the last '=';
 *                      FILE in such a directory)
 *   mount=DEST^TYPE^SOURCE^FLAGS^DATA   (^ is 0x1f; FLAGS is the decimal MS_* mask, of the
 *                      flags the edge sends: no remount, move or propagation change) mounted
 *                      inside root, in order; DEST resolves inside root (symlinks cannot leave
 *                      it) and is created when missing. A bind with more flags than MS_BIND|MS_REC
 *                      is remounted with them, keeping the flags the kernel locks.
 *   dir=DEST^MODE^FLAGS   (among the mounts, in order) a directory made at DEST on the mount
 *                      above it, of MODE (octal, within 1777), bound onto itself with FLAGS (of
 *                      MS_RDONLY|MS_NOSUID|MS_NODEV|MS_NOEXEC): /dev/shm in the /dev tmpfs,
 *                      without a superblock of its own
 *   dev=NAME           bind the host's /dev/NAME at /dev/NAME inside (repeat)
 *   link=TARGET^PATH   a symlink inside root (repeat)
 *   mask=PATH          hidden: a directory under maskdir bound read-only (resolved in root before
 *                      pivot_root) or, without maskdir, a read-only tmpfs; a file under
 *                      /dev/null after pivot_root; missing paths are skipped (repeat)
 *   maskdir=PATH       an empty directory of the host's that no sandbox id owns
 *   ro=PATH            after pivot_root: remounted read-only (repeat)
 *   rlimit=RES:SOFT:HARD
 *   caps=HEX           the capability set kept (bounding, permitted, effective; bits up to
 *                      CAP_LAST_CAP); all else dropped
 *   nnp=1              no_new_privs
 *   cwd=PATH  env=K=V (repeat)  arg=ARG (repeat; arg 0 is the program, a path inside root)
 *
 * The reply is the init's host pid once it has exec'd, or the step that failed and its errno.
 * The init ends up a child of warren-hostd (a subreaper), which reaps it; it is its own session,
 * so it outlives warren-hostd and the edge (a restarted edge finds it again by pid and start time).
 *
 * This file: the parent's helpers, stage 1 and the request; the spec parser is in spawn-spec.c,
 * the child from clone to exec in spawn-child.c.
 */
#include "spawn-internal.h"

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
		spawn_fail("overlay", NULL);
	}
	strcpy(buf, spec);
	if (spawn_split(buf, p, 3) != 3 || strchr(spec, ',')) {
		errno = EINVAL;
		spawn_fail("overlay", spec);
	}
	int n = snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=%s,workdir=%s,xino=on", p[0], p[1], p[2]);
	if (n < 0 || n >= (int)sizeof opts) {
		errno = E2BIG;
		spawn_fail("overlay", NULL);
	}
	if (overlay_fsopen(p[0], p[1], p[2], target) == 0)
		return;
	if (errno != ENOSYS && errno != EINVAL)
		spawn_fail("overlay", target);
	/* Older kernels: one page of options. nodev: a device node in an image layer opens nothing
	 * (the devices cgroup denies it too). */
	long page = sysconf(_SC_PAGESIZE);
	if (n >= (page > 0 ? page : 4096)) {
		errno = E2BIG;
		spawn_fail("overlay (too many layers for this kernel)", NULL);
	}
	if (mount("overlay", target, "overlay", MS_NODEV, opts) < 0)
		spawn_fail("overlay", target);
}

/*
 * Closes every descriptor from 3 on but `a` and `b` (-1: none). Stage 1 comes with all of
 * warren-hostd's (a user namespace for each recent id range, up to 512, and the pool's network
 * namespaces): closed here, the init it clones neither copies them nor closes them again at its
 * exec.
 */
static void close_others(int a, int b)
{
	int keep[2] = { a < b ? a : b, a < b ? b : a };
	unsigned from = 3;
	for (int i = 0; i < 2; i++) {
		if (keep[i] < (int)from)
			continue;
		if ((unsigned)keep[i] > from && syscall(SYS_close_range, from, (unsigned)keep[i] - 1, 0) < 0)
			spawn_fail("close_range", NULL);
		from = (unsigned)keep[i] + 1;
	}
	if (syscall(SYS_close_range, from, ~0u, 0) < 0)
		spawn_fail("close_range", NULL);
}

/*
 * Runs in a short-lived process between warren-hostd and the init, so warren-hostd serves other
 * requests (and starts other sandboxes) meanwhile. It makes the cgroups and the init socket; its own mount namespace gets
 * the sandbox's overlay, so the host's mount table never grows with sandboxes (a new mount
 * namespace copies the whole table: with the overlays on the host, every create and delete cost
 * grew with the number of sandboxes). Joins the sandbox's cgroups, clones the init from there
 * (born in them), writes its id maps, lets it go, and reports "PID" or the failure on rep; then
 * exits, and the init is re-parented to warren-hostd (a child subreaper).
 */
__attribute__((noreturn)) static void stage1(struct spec *sp, int rep)
{
	report_fd = rep;
	close_others(rep, sp->layermap ? sp->layerns : -1);
	for (int i = 0; i < sp->ncg; i++)
		if (mkdir_p(sp->cg[i]) < 0)
			spawn_fail("cgroup", sp->cg[i]);
	/* Writes to one file in a row share one open of it (the devices cgroup's eight allow rules: a
	 * cgroupfs open costs more than the write, ~15 µs each here). Each write is still one value. */
	int cfd = -1;
	for (int i = 0; i < sp->ncgw; i++) {
		char *eq = strrchr(sp->cgw[i], '=');
		*eq = 0;
		size_t flen = (size_t)(eq - sp->cgw[i]);
		char *prev = i > 0 ? strrchr(sp->cgw[i - 1], '=') : NULL;
		int same = cfd >= 0 && prev && (size_t)(prev - sp->cgw[i - 1]) == flen && !strncmp(sp->cgw[i - 1], sp->cgw[i], flen);
		if (!same) {
			if (cfd >= 0)
				close(cfd);
			cfd = open(sp->cgw[i], O_WRONLY | O_CLOEXEC);
			if (cfd < 0)
				spawn_fail("cgroup write", sp->cgw[i]);
		}
		size_t len = strlen(eq + 1);
		ssize_t w = write(cfd, eq + 1, len);
		if (w != (ssize_t)len) {
			if (w >= 0)
				errno = EIO;
			spawn_fail("cgroup write", sp->cgw[i]);
		}
		*eq = '=';
	}
	if (cfd >= 0)
		close(cfd);
	int lfd = listen_at(sp->sock);
	if (lfd < 0)
		spawn_fail("init socket", sp->sock);
	int logfd = open(sp->log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	if (logfd < 0)
		spawn_fail("log", sp->log);
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul < 0)
		spawn_fail("/dev/null", NULL);
	if (unshare(CLONE_NEWNS) < 0)
		spawn_fail("mount namespace", NULL);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		spawn_fail("make mounts private", NULL);
	/* Relative lower dirs resolve from overlaydir: mount options must fit in one page. */
	if (sp->overlaydir && chdir(sp->overlaydir) < 0)
		spawn_fail("overlay dir", sp->overlaydir);
	if (sp->overlay && sp->layermap)
		idmap_lowers(sp->overlay, sp->layerns);
	if (sp->overlay)
		mount_overlay(sp->overlay, sp->root);
	/* A network namespace the edge prepared (veth, addresses): owned by the host's user
	 * namespace, so root in the sandbox cannot reconfigure it. */
	if (sp->netns) {
		int nfd = open(sp->netns, O_RDONLY | O_CLOEXEC);
		if (nfd < 0 || setns(nfd, CLONE_NEWNET) < 0)
			spawn_fail("join network namespace", sp->netns);
		close(nfd);
		/* sysfs may only be mounted by a user namespace that owns the network namespace: the
		 * sandbox's does not own this one, so its /sys (showing this namespace's devices) is
		 * mounted here, read-only, and reaches the sandbox locked under its root. */
		if (!sp->root || !sp->overlay) {
			errno = EINVAL;
			spawn_fail("netns without an overlay root", NULL);
		}
		char sys[PATH_MAX];
		snprintf(sys, sizeof sys, "%s/sys", sp->root);
		if (mkdir(sys, 0555) < 0 && errno != EEXIST)
			spawn_fail("mount point", sys);
		if (mount("sysfs", sys, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			spawn_fail("sysfs", sys);
	}
	/* Stage 1 joins the sandbox's cgroups itself, so the init is born in them and never moved.
	 * Written as "0" to each hierarchy's `tasks`: a thread moving itself takes no global lock,
	 * where moving another process (its pid to cgroup.procs) takes cgroup_threadgroup_rwsem for
	 * writing, and that waits for an RCU grace period: 6–22 ms of every create's wall time on the
	 * machines Warren is measured on, at any count of sandboxes. What stage 1 does from here (the
	 * clone and the init's namespaces) is charged to the sandbox, as the init's own start is. */
	char path[PATH_MAX + 32];
	for (int i = 0; i < sp->ncg; i++) {
		snprintf(path, sizeof path, "%s/tasks", sp->cg[i]);
		if (write_file(path, "0") < 0)
			spawn_fail("join cgroup", sp->cg[i]);
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		spawn_fail("socketpair", NULL);
	/* fork-like clone (no new stack): the child returns here with its own copy of memory. */
	pid_t pid = (pid_t)syscall(SYS_clone, (unsigned long)(sp->clone_flags | SIGCHLD), NULL, NULL, NULL, 0UL);
	if (pid < 0)
		spawn_fail("clone", NULL);
	if (pid == 0) {
		close(sv[0]);
		close(rep);
		spawn_child(sp, sv[1], lfd, nul, logfd);
	}
	close(sv[1]);
	if (write_map(pid, "uid_map", sp->uidmap) < 0 || write_map(pid, "gid_map", sp->gidmap) < 0) {
		kill(pid, SIGKILL);
		spawn_fail("id map", NULL);
	}
	if (write(sv[0], "g", 1) != 1) {
		kill(pid, SIGKILL);
		spawn_fail("start", NULL);
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
		spawn_fail("start", NULL);
	}
	char msg[512];
	ssize_t r = read(sv[0], msg, sizeof msg);
	if (r > 0) {
		kill(pid, SIGKILL);
		if (write(rep, msg, (size_t)r) < 0)
			_exit(1);
		_exit(0);
	}
	/* Its start time too (the edge would read /proc for it): 0 when it is gone or a zombie already. */
	if (dprintf(rep, "ok %d %llu", pid, proc_start_time(pid)) < 0)
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
	if (spawn_parse(&sp, f, n, &bad) < 0) {
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
