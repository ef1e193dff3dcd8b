/*
 * Per-call isolation in a FnCall worker (a container sandbox whose init keeps CAP_SYS_ADMIN in
 * the sandbox's own user namespace; its calls never do). Every call gets new mount, pid, IPC and
 * UTS namespaces and a fresh writable layer, so nothing of one call (files, processes, System V
 * IPC, /dev/shm) is there for the next, and the worker is reused instead of a new sandbox per call.
 *
 * Built into warren-init and as a shared object that the Python zygote loads with ctypes: it uses
 * only libc calls that every glibc has had since 2.2.5 (no stat family, no fortified wrappers), so
 * the object loads into an image's Python whatever its glibc.
 */
#define _GNU_SOURCE
#include "fn.h"
#include "seccomp.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define STAGE "/.warren"

static char err[256];

static int worker_filtered;

void warren_fn_set_worker_filtered(int on) { worker_filtered = on != 0; }

int warren_fn_worker_filtered(void) { return worker_filtered; }

const char *warren_fn_error(void) { return err; }

static int fail(const char *step, const char *path)
{
	int e = errno ? errno : EIO;
	snprintf(err, sizeof err, "%s%s%s: %s", step, path ? " " : "", path ? path : "", strerror(e));
	return -e;
}

/* The same paths a container sandbox has hidden and read-only in its /proc (oci-config.ts). */
static const char *const masked[] = { "/proc/acpi",	 "/proc/asound",      "/proc/kcore",	    "/proc/keys",
				      "/proc/latency_stats", "/proc/timer_list",  "/proc/timer_stats", "/proc/sched_debug",
				      "/proc/scsi",	 "/proc/kpagecgroup", "/proc/kpageflags",  "/proc/kpagecount" };
static const char *const readonly[] = { "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger" };

int warren_fn_next_pid_ns(void)
{
	/* unshare refuses a second new pid namespace while the first is still the one for
	 * children: going back to our own first makes room for the next. */
	static int own = -1;
	errno = 0;
	if (own < 0 && (own = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC)) < 0)
		return fail("open", "/proc/self/ns/pid");
	if (setns(own, CLONE_NEWPID) < 0)
		return fail("setns", "pid");
	return unshare(CLONE_NEWPID) < 0 ? fail("unshare", "pid") : 0;
}

/* A new proc on a mount point inside the stage, with the sandbox's usual paths hidden or read-only.
 * A hidden directory gets the stage's empty directory bound over it, read-only, and a hidden file
 * /dev/null (as runc masks): binds, not a tmpfs each, which would make (and, at the call's end, tear down) a
 * superblock per path — and a tmpfs tried on a file makes one before it fails. */
static int call_proc(void)
{
	char p[128];
	if (mount("proc", STAGE "/r/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return fail("mount", "/proc");
	for (size_t i = 0; i < sizeof masked / sizeof masked[0]; i++) {
		snprintf(p, sizeof p, STAGE "/r%s", masked[i]);
		/* Which of the two it is: an O_PATH open (the stat calls are left out on purpose, see the top). */
		int fd = open(p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int dir = fd >= 0;
		if (fd >= 0)
			close(fd);
		else if (errno == ENOENT)
			continue;
		if (mount(dir ? STAGE "/e" : "/dev/null", p, NULL, MS_BIND, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			return fail("mask", masked[i]);
		}
		if (dir && mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			return fail("mask read-only", masked[i]);
	}
	for (size_t i = 0; i < sizeof readonly / sizeof readonly[0]; i++) {
		snprintf(p, sizeof p, STAGE "/r%s", readonly[i]);
		if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0) {
			if (errno == ENOENT)
				continue;
			return fail("read-only bind", readonly[i]);
		}
		if (mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			return fail("read-only", readonly[i]);
	}
	return 0;
}

/* Where the worker sees its image's layers, top first (oci-config.ts FN_LAYERS). */
#define FN_LAYERS "/.warren-layers"
#define LOWERS_MAX 4096

static const char *const host_files[] = { "/etc/hosts", "/etc/hostname", "/etc/resolv.conf" };

/* "/.warren-layers/0:/.warren-layers/1:…" for the layers there are, or "/" when none. */
static int layer_list(char *out, size_t size)
{
	size_t n = 0;
	out[0] = 0;
	for (int i = 0;; i++) {
		char p[64];
		snprintf(p, sizeof p, FN_LAYERS "/%d", i);
		int fd = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			break;
		close(fd);
		int w = snprintf(out + n, size - n, "%s%s", n ? ":" : "", p);
		if (w < 0 || (size_t)w >= size - n) {
			errno = E2BIG;
			return -1;
		}
		n += (size_t)w;
	}
	if (!n)
		snprintf(out, size, "/");
	errno = 0;
	return 0;
}

static int call_overlay(const char *lowers)
{
	char opts[LOWERS_MAX + 128];
	int one_fs = !strcmp(lowers, "/");
	snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=" STAGE "/u,workdir=" STAGE "/w,userxattr%s", lowers, one_fs ? "" : ",xino=on");
	return mount("overlay", STAGE "/r", "overlay", MS_NODEV, opts);
}

/* The worker's file at `path` copied into the call's root (replacing a link there); absent: left as the image has it. */
static int copy_host_file(const char *path)
{
	char dst[128], buf[8192];
	int in = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (in < 0)
		return errno == ENOENT || errno == ELOOP ? 0 : -1;
	snprintf(dst, sizeof dst, STAGE "/r%s", path);
	int out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out < 0 && errno == ELOOP && unlink(dst) == 0)
		out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (out < 0) {
		int e = errno;
		close(in);
		errno = e;
		return e == ENOENT ? 0 : -1;
	}
	ssize_t r;
	int rc = 0;
	while ((r = read(in, buf, sizeof buf)) > 0)
		if (write(out, buf, (size_t)r) != r) {
			rc = -1;
			break;
		}
	if (r < 0)
		rc = -1;
	int e = errno;
	close(in);
	close(out);
	errno = e;
	return rc;
}

static int drop_sys_admin(void);

int warren_fn_isolate(unsigned long tmpfs_kib, int unshared)
{
	char opts[64];
	errno = 0;
	if (getpid() != 1) {
		errno = EINVAL;
		return fail("isolate", "(not PID 1 of a new pid namespace)");
	}
	if (!unshared && unshare(CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS) < 0)
		return fail("unshare", NULL);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail("make mounts private", NULL);
	/* The image's layers as the worker sees them (outside the stage: the tmpfs below does not cover them). */
	char lowers[LOWERS_MAX];
	if (layer_list(lowers, sizeof lowers) < 0)
		return fail("layers", FN_LAYERS);
	/* The stage covers the platform directory in this namespace only; it holds the call's
	 * writable layer and, after pivot_root, is reachable from nowhere but the overlay. */
	snprintf(opts, sizeof opts, "mode=0700,size=%luk", tmpfs_kib ? tmpfs_kib : 65536);
	if (mount("tmpfs", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return fail("tmpfs", STAGE);
	if (mkdir(STAGE "/u", 0755) < 0 || mkdir(STAGE "/w", 0700) < 0 || mkdir(STAGE "/r", 0755) < 0 || mkdir(STAGE "/e", 0555) < 0)
		return fail("mkdir", STAGE);
	/* The image's own layers as the lower ones (what the image holds, never what a call
	 * wrote), so the call's root is one overlay deep and xino keeps the inode numbers a
	 * listing reports equal to what stat says. A worker without them: its root. */
	if (call_overlay(lowers) < 0)
		return fail("overlay", STAGE "/r");
	/* The files the platform wrote for the worker (host name, localhost, resolver), the
	 * call's own copies. */
	for (size_t i = 0; i < sizeof host_files / sizeof host_files[0]; i++)
		if (copy_host_file(host_files[i]) < 0)
			return fail("copy", host_files[i]);
	/* /dev read-only (its nodes still work), with a new /dev/shm and this IPC namespace's mqueue. */
	if (mount("/dev", STAGE "/r/dev", NULL, MS_BIND | MS_REC, NULL) < 0)
		return fail("bind", "/dev");
	if (mount("shm", STAGE "/r/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=1777,size=65536k") < 0)
		return fail("tmpfs", "/dev/shm");
	if (mount("mqueue", STAGE "/r/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 && errno != ENOENT)
		return fail("mqueue", "/dev/mqueue");
	if (mount(NULL, STAGE "/r/dev", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID, NULL) < 0)
		return fail("read-only", "/dev");
	if (mount("/sys", STAGE "/r/sys", NULL, MS_BIND | MS_REC, NULL) < 0 && errno != ENOENT)
		return fail("bind", "/sys");
	mount(NULL, STAGE "/r/sys", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	/* This process is PID 1 of the call's pid namespace: the proc mounted now shows it. (The
	 * kernel mounts a new proc only where one is fully visible: the worker's /proc is.) */
	int r = call_proc();
	if (r < 0)
		return r;
	if (chdir(STAGE "/r") < 0)
		return fail("chdir", STAGE "/r");
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return fail("pivot_root", NULL);
	if (umount2(".", MNT_DETACH) < 0)
		return fail("detach the worker's root", NULL);
	if (chdir("/") < 0)
		return fail("chdir", "/");
	/* The call, not the worker's init or zygote, is what the OOM killer should pick. */
	int oom = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
	if (oom >= 0) {
		if (write(oom, "500", 3) < 0) {
		}
		close(oom);
	}
	r = drop_sys_admin();
	if (r < 0)
		return r;
	/* The filter every other sandbox process has: no mounts or namespaces of its own. Under the
	 * worker's filter (installed by warren-init unless the edge started the worker unhardened, for
	 * the hardening benchmark's baseline) only what it adds: a quarter of the program to check and
	 * compile. Any other filter the worker may run under (a runtime's) does not count. */
	int narrow = worker_filtered && prctl(PR_GET_SECCOMP, 0, 0, 0, 0) == SECCOMP_MODE_FILTER;
	if (warren_seccomp_install_profile(narrow ? WARREN_SECCOMP_NARROW : WARREN_SECCOMP_STRICT) < 0)
		return fail("seccomp", NULL);
	return 0;
}

static int drop_sys_admin(void)
{
	if (prctl(PR_CAPBSET_DROP, CAP_SYS_ADMIN, 0, 0, 0) < 0)
		return fail("drop CAP_SYS_ADMIN", NULL);
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return fail("capget", NULL);
	d[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
	d[CAP_SYS_ADMIN / 32].permitted &= ~(1u << (CAP_SYS_ADMIN % 32));
	d[CAP_SYS_ADMIN / 32].inheritable &= ~(1u << (CAP_SYS_ADMIN % 32));
	if (syscall(SYS_capset, &h, d) < 0)
		return fail("capset", NULL);
	return 0;
}
