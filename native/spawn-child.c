/*
 * warren-hostd's sandbox spawner: the child, from clone to exec: mounts inside the root (resolved
 * in it), devices, links, pivot_root, masked and read-only paths, capabilities, the exec.
 */
#include "spawn-internal.h"

/* ---- the child: from clone to exec ---- */

int report_fd = -1;

__attribute__((noreturn)) void spawn_fail(const char *what, const char *arg)
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

/*
 * A bind mount just made at `dest` (inside root) remounted with `flags` besides the ones the
 * kernel locks. An fd taken before the bind names the covered directory: the path is looked up
 * again to reach the new mount.
 */
static void rebind(int rootfd, const char *dest, unsigned long flags)
{
	int fd = open_in(rootfd, dest, O_PATH);
	if (fd < 0)
		spawn_fail("mount point", dest);
	char target[64];
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	unsigned long f = MS_BIND | MS_REMOUNT | flags | locked_flags(target);
	if (f & (MS_NOATIME | MS_STRICTATIME))
		f &= ~MS_RELATIME;
	if (mount(NULL, target, NULL, f, NULL) < 0)
		spawn_fail("remount", dest);
	close(fd);
}

static void do_mount(int rootfd, struct mnt *m)
{
	int is_bind = (m->flags & MS_BIND) != 0;
	int file = 0;
	if (is_bind) {
		struct stat st;
		if (stat(m->source, &st) < 0)
			spawn_fail("mount source", m->source);
		file = !S_ISDIR(st.st_mode);
	}
	int fd = ensure_in(rootfd, m->dest, file);
	if (fd < 0)
		spawn_fail("mount point", m->dest);
	char target[64];
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	unsigned long first = is_bind ? m->flags & (MS_BIND | MS_REC) : m->flags;
	if (mount(m->source, target, m->type, first, *m->data ? m->data : NULL) < 0)
		spawn_fail("mount", m->dest);
	close(fd);
	if (is_bind && (m->flags & ~(MS_BIND | MS_REC)))
		rebind(rootfd, m->dest, m->flags & ~(MS_BIND | MS_REC));
}

/*
 * dir=: a directory of the mount above it (the /dev tmpfs) bound onto itself with flags of its
 * own: /dev/shm as runtimes make it, a tmpfs of its own, would be one more superblock a sandbox
 * (see spawn_mask on what each costs the host); its room is the tmpfs's above.
 */
static void bind_dir(int rootfd, struct mnt *m)
{
	int fd = ensure_in(rootfd, m->dest, 0);
	if (fd < 0)
		spawn_fail("directory", m->dest);
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		errno = ENOTDIR;
		spawn_fail("directory", m->dest);
	}
	char target[64];
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	if (chmod(target, (mode_t)strtoul(m->data, NULL, 8)) < 0)
		spawn_fail("directory mode", m->dest);
	if (mount(target, target, NULL, MS_BIND, NULL) < 0)
		spawn_fail("bind", m->dest);
	close(fd);
	rebind(rootfd, m->dest, m->flags);
}

/*
 * With maskdir (an empty directory of the host's, that nothing inside can write to: its owner,
 * the host's root, is no id of the sandbox's): each masked directory, resolved in the root
 * before pivot_root, has it bound over it read-only. Done masks are taken off the list; files
 * (and every mask without maskdir) are spawn_mask's after pivot_root.
 */
static void mask_dirs(int rootfd, struct spec *sp)
{
	for (int i = 0; i < sp->nmasks && sp->maskdir; i++) {
		int fd = open_in(rootfd, sp->masks[i], O_PATH);
		if (fd < 0) {
			if (errno == ENOENT)
				continue;
			spawn_fail("mask", sp->masks[i]);
		}
		struct stat st;
		if (fstat(fd, &st) < 0)
			spawn_fail("mask", sp->masks[i]);
		if (!S_ISDIR(st.st_mode)) {
			close(fd);
			continue;
		}
		char target[64];
		snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
		if (mount(sp->maskdir, target, NULL, MS_BIND, NULL) < 0)
			spawn_fail("mask", sp->masks[i]);
		close(fd);
		rebind(rootfd, sp->masks[i], MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC);
		sp->masks[i] = NULL;
	}
}

static void bind_dev(int rootfd, const char *name)
{
	char host[PATH_MAX], inside[PATH_MAX], target[64];
	snprintf(host, sizeof host, "/dev/%s", name);
	snprintf(inside, sizeof inside, "/dev/%s", name);
	int fd = ensure_in(rootfd, inside, 1);
	if (fd < 0)
		spawn_fail("device node", inside);
	snprintf(target, sizeof target, "/proc/self/fd/%d", fd);
	if (mount(host, target, NULL, MS_BIND, NULL) < 0)
		spawn_fail("bind device", host);
	close(fd);
}

static void make_link(int rootfd, char *spec)
{
	char *p[2] = { spec, NULL };
	if (spawn_split(spec, p, 2) != 2)
		spawn_fail("symlink", spec);
	char buf[PATH_MAX];
	if (p[1][0] != '/' || strlen(p[1]) >= sizeof buf)
		spawn_fail("symlink", p[1]);
	strcpy(buf, p[1]);
	char *slash = strrchr(buf, '/');
	*slash = 0;
	int parent = ensure_in(rootfd, *buf ? buf : "/", 0);
	if (parent < 0)
		spawn_fail("symlink parent", p[1]);
	if (symlinkat(p[0], parent, slash + 1) < 0 && errno != EEXIST)
		spawn_fail("symlink", p[1]);
	close(parent);
}

/*
 * After pivot_root: a file is hidden under /dev/null; a directory (without maskdir: see
 * mask_dirs) under an empty read-only tmpfs, the first one's bound over the rest. One tmpfs, not
 * one each: every superblock registers a shrinker, and every memory cgroup on the host keeps
 * bookkeeping (~16 bytes: 520-byte blocks in 1 KiB objects per 64 ids) for each shrinker id up
 * to the highest ever used, so a node's kernel memory grows with its sandboxes times their
 * superblocks, per sandbox (~1.2 MiB a sandbox at 9,500 sandboxes of 8 superblocks).
 */
void spawn_mask(const char *path)
{
	static const char *empty_dir;
	struct stat st;
	if (lstat(path, &st) < 0) {
		if (errno == ENOENT)
			return;
		spawn_fail("mask", path);
	}
	int r;
	if (!S_ISDIR(st.st_mode))
		r = mount("/dev/null", path, NULL, MS_BIND, NULL);
	else if (empty_dir)
		r = mount(empty_dir, path, NULL, MS_BIND, NULL);
	else if ((r = mount("tmpfs", path, "tmpfs", MS_RDONLY, NULL)) == 0)
		empty_dir = path;
	if (r < 0 && errno != ENOENT)
		spawn_fail("mask", path);
}

static void readonly(const char *path)
{
	if (mount(path, path, NULL, MS_BIND | MS_REC, NULL) < 0) {
		if (errno == ENOENT)
			return;
		spawn_fail("read-only bind", path);
	}
	if (mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | locked_flags(path), NULL) < 0)
		spawn_fail("read-only remount", path);
}

static void set_caps(uint64_t keep)
{
	for (int cap = 0; cap <= 63; cap++) {
		if (keep & (1ULL << cap))
			continue;
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL)
				break; /* past the kernel's last capability */
			spawn_fail("drop capability", NULL);
		}
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		spawn_fail("clear ambient capabilities", NULL);
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2] = {
		{ .effective = (uint32_t)keep, .permitted = (uint32_t)keep, .inheritable = 0 },
		{ .effective = (uint32_t)(keep >> 32), .permitted = (uint32_t)(keep >> 32), .inheritable = 0 },
	};
	if (syscall(SYS_capset, &h, d) < 0)
		spawn_fail("capset", NULL);
}

__attribute__((noreturn)) void spawn_child(struct spec *sp, int sync, int lfd, int nul, int logfd)
{
	report_fd = sync;
	char go;
	if (read(sync, &go, 1) != 1)
		_exit(127); /* the parent gave up */
	if (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0)
		spawn_fail("become root of the user namespace", NULL);
	/* A network namespace of our own (no prepared one joined) has loopback, up. */
	if (sp->clone_flags & CLONE_NEWNET) {
		int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct ifreq ifr = { 0 };
		strcpy(ifr.ifr_name, "lo");
		if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
			spawn_fail("loopback", NULL);
		ifr.ifr_flags |= IFF_UP;
		if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
			spawn_fail("loopback up", NULL);
		close(s);
	}
	/* After the parent put us in our cgroups, so that they are the namespace's root. */
	if (sp->cgroupns && unshare(CLONE_NEWCGROUP) < 0)
		spawn_fail("cgroup namespace", NULL);
	/* Mounts copied into a new user namespace are locked, and pivot_root refuses a locked new
	 * root: bind it onto itself for a mount of our own. */
	if (mount(sp->root, sp->root, NULL, MS_BIND | MS_REC, NULL) < 0)
		spawn_fail("bind root", sp->root);
	int rootfd = open(sp->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		spawn_fail("root", sp->root);
	for (int i = 0; i < sp->nmounts; i++)
		/* With a joined network namespace, stage 1 mounted sysfs already (see there). */
		if (!*sp->mounts[i].type)
			bind_dir(rootfd, &sp->mounts[i]);
		else if (!(sp->netns && !strcmp(sp->mounts[i].type, "sysfs")))
			do_mount(rootfd, &sp->mounts[i]);
	for (int i = 0; i < sp->ndevs; i++)
		bind_dev(rootfd, sp->devs[i]);
	for (int i = 0; i < sp->nlinks; i++)
		make_link(rootfd, sp->links[i]);
	mask_dirs(rootfd, sp);
	if (fchdir(rootfd) < 0)
		spawn_fail("chdir root", sp->root);
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		spawn_fail("pivot_root", sp->root);
	if (umount2(".", MNT_DETACH) < 0)
		spawn_fail("detach the host's root", NULL);
	if (chdir("/") < 0)
		spawn_fail("chdir /", NULL);
	close(rootfd);
	for (int i = 0; i < sp->nmasks; i++)
		if (sp->masks[i])
			spawn_mask(sp->masks[i]);
	for (int i = 0; i < sp->nros; i++)
		readonly(sp->ros[i]);
	if (sp->hostname && sethostname(sp->hostname, strlen(sp->hostname)) < 0)
		spawn_fail("hostname", sp->hostname);
	for (int i = 0; i < sp->nrl; i++) {
		struct rlimit r = { .rlim_cur = sp->rl[i].soft, .rlim_max = sp->rl[i].hard };
		if (setrlimit(sp->rl[i].res, &r) < 0)
			spawn_fail("rlimit", NULL);
	}
	if (setsid() < 0)
		spawn_fail("setsid", NULL);
	if (chdir(sp->cwd) < 0)
		spawn_fail("cwd", sp->cwd);
	/* stdio and fd 3; every other fd (the report socket included) closes at exec. */
	if (dup2(nul, 0) < 0 || dup2(nul, 1) < 0 || dup2(logfd, 2) < 0)
		spawn_fail("stdio", NULL);
	if (lfd == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(lfd, 3) < 0)
		spawn_fail("init socket", NULL);
	if (syscall(SYS_close_range, 4u, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
		spawn_fail("close_range", NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	if (sp->have_caps)
		set_caps(sp->caps);
	if (sp->nnp && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		spawn_fail("no_new_privs", NULL);
	execve(sp->argv[0], sp->argv, sp->env);
	spawn_fail("exec", sp->argv[0]);
}

/* Each lower layer of an overlay spec (LOWER^UPPER^WORK, LOWER colon-joined) mounted idmapped over
 * itself, in this (private) mount namespace only. */
void idmap_lowers(const char *spec, int u)
{
	static char buf[PATH_MAX * 64];
	snprintf(buf, sizeof buf, "%s", spec);
	char *end = strchr(buf, SEP);
	if (end)
		*end = 0;
	for (char *save = NULL, *l = strtok_r(buf, ":", &save); l; l = strtok_r(NULL, ":", &save))
		if (idmap_mount(l, l, u) < 0)
			spawn_fail("idmapped layer", l);
}
