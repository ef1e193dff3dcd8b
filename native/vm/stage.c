/*
 * warren-vmstage: PID 1 of a Warren microVM until the sandbox's own init takes over.
 *
 * Runs from the initramfs Warren builds (packages/edge/src/backends/microvm/initramfs.ts):
 * loads the kernel modules listed in /modules/order, mounts the image's EROFS layers (read-only
 * virtio disks with serials warren-l0, warren-l1, ..., bottom first, and a layer's file data
 * on disk warren-dN when it is split off) under an overlay whose upper
 * is the writable disk (serial warren-rw, ext4, made by the host), puts the platform files at
 * /.warren, moves into that root, and execs /.warren/warren-init as PID 1 with a listening Unix
 * socket as fd 3, as a container's init gets. A child it forks first carries the init's
 * connections over the virtio-serial port named warren.agent (mux.c); that socket's name is in
 * a network namespace only the child runs in (see VM_AGENT_NAME). Kernel command line:
 * warren.layers=KINDS (see layer_kinds). With warren.dax the layers are not disks but persistent
 * memory mapped from the host's files (/dev/pmemN, see next_pmem), mounted with DAX: read in
 * place, never copied into the guest's page cache. Any failure is written to the console and
 * powers off.
 *
 * With warren.systemd on the command line (a full VM), the image's own /sbin/init (systemd)
 * becomes PID 1 instead and boots the image as a machine: warren-init then runs beside it, a
 * child forked first in a session of its own, and /sys is writable (udev needs it).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <time.h>
#include <sched.h>
#include <stdint.h>
#include <linux/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <stddef.h>
#include <unistd.h>
#include "vm.h"

#define MAX_LAYERS 64

static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "warren-vmstage: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, ": %s\n", strerror(errno));
	va_end(ap);
	sync();
	reboot(RB_POWER_OFF);
	_exit(1);
}

static void must_mount(const char *src, const char *dst, const char *type, unsigned long flags, const char *data)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, flags, data) < 0)
		die("mount %s on %s (%s)", src, dst, type ? type : "bind");
}

/* Loads each module named in /modules/order (one file name a line, dependencies first). */
static void load_modules(void)
{
	FILE *f = fopen("/modules/order", "r");
	if (!f)
		return;
	char line[256], path[300];
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = 0;
		if (!line[0])
			continue;
		snprintf(path, sizeof path, "/modules/%s", line);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			die("open %s", path);
		if (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST)
			die("load module %s", line);
		close(fd);
	}
	fclose(f);
}

/* The /dev path of the virtio disk whose serial is `serial`, waiting up to 10 s for it to appear. */
static int find_disk(const char *serial, char *out, size_t n)
{
	return vm_sysfs_find("/sys/block", "serial", serial, out, n);
}

/*
 * The next of the layers mapped into the guest (warren.dax: see the host's dax-layout.ts):
 * legacy persistent memory the kernel serves as /dev/pmem0, /dev/pmem1, ... in address order,
 * each layer's image then its data, bottom layer first. Waits up to 10 s for /dev/pmemN, and checks
 * that its address is past the one before it (the host laid them out so).
 */
static void next_pmem(int *k, unsigned long long *last, char *out, size_t n)
{
	char path[128], text[64] = { 0 };
	snprintf(path, sizeof path, "/sys/block/pmem%d/device/resource", *k);
	int fd = -1;
	for (int tries = 0; tries < 1000 && (fd = open(path, O_RDONLY | O_CLOEXEC)) < 0; tries++) {
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	if (fd < 0)
		die("no persistent memory pmem%d", *k);
	ssize_t r = read(fd, text, sizeof text - 1);
	close(fd);
	unsigned long long at = r > 0 ? strtoull(text, NULL, 0) : 0;
	if (at <= *last) {
		errno = EINVAL;
		die("pmem%d is at %#llx, not past %#llx", *k, at, *last);
	}
	*last = at;
	snprintf(out, n, "/dev/pmem%d", (*k)++);
}

/*
 * warren.layers=KINDS from the kernel command line: one letter per layer, bottom first: `d` for a
 * layer whose file data is on a disk of its own (serial warren-dN), `m` for one that is whole.
 */
static int layer_kinds(const char *cmdline, char *out, size_t n)
{
	const char *p = strstr(cmdline, "warren.layers=");
	size_t len = p ? strspn(p + strlen("warren.layers="), "dm") : 0;
	if (len < 1 || len > MAX_LAYERS || len >= n) {
		errno = EINVAL;
		die("warren.layers= names %zu layers", len);
	}
	memcpy(out, p + strlen("warren.layers="), len);
	out[len] = 0;
	return (int)len;
}

/*
 * warren.idshift=BASE:SIZE from the kernel command line: the image layers' files are stored with
 * their ids shifted by BASE (the node's layer range, which a container's user namespace maps back
 * to 0); 0 when absent.
 */
static unsigned long id_shift(const char *cmdline, unsigned long *size)
{
	const char *p = strstr(cmdline, "warren.idshift=");
	unsigned long base = 0;
	*size = 0;
	if (p && sscanf(p + strlen("warren.idshift="), "%lu:%lu", &base, size) != 2)
		base = *size = 0;
	return base;
}

/* A user namespace whose ids BASE.. are 0.. outside: an idmapped mount through it shows BASE as 0. */
static int shift_userns(unsigned long base, unsigned long size)
{
	int ready[2], done[2];
	if (pipe2(ready, O_CLOEXEC) < 0 || pipe2(done, O_CLOEXEC) < 0)
		die("pipe");
	pid_t c = fork();
	if (c < 0)
		die("fork");
	if (c == 0) {
		char x = 0;
		close(ready[0]);
		close(done[1]); /* its read below ends when the parent closes its end */
		if (unshare(CLONE_NEWUSER) < 0)
			_exit(1);
		if (write(ready[1], &x, 1) != 1 || read(done[0], &x, 1) < 0)
			_exit(1);
		_exit(0);
	}
	close(ready[1]);
	close(done[0]);
	char x, path[64], map[64];
	if (read(ready[0], &x, 1) != 1)
		die("user namespace for the layers' ids");
	snprintf(map, sizeof map, "%lu 0 %lu\n", base, size);
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof path, "/proc/%d/%s", c, i ? "gid_map" : "uid_map");
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd < 0 || write(fd, map, strlen(map)) < 0)
			die("write %s", path);
		close(fd);
	}
	snprintf(path, sizeof path, "/proc/%d/ns/user", c);
	int ns = open(path, O_RDONLY | O_CLOEXEC);
	if (ns < 0)
		die("open %s", path);
	close(done[1]);
	close(ready[0]);
	waitpid(c, NULL, 0);
	return ns;
}

/* Mounts `dir` again over itself, idmapped through `userns`. */
static void idmap_over(const char *dir, int userns)
{
	int t = (int)syscall(SYS_open_tree, AT_FDCWD, dir, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC);
	struct mount_attr a = { .attr_set = MOUNT_ATTR_IDMAP, .userns_fd = (uint64_t)userns };
	if (t < 0 || syscall(SYS_mount_setattr, t, "", AT_EMPTY_PATH, &a, sizeof a) < 0 ||
	    syscall(SYS_move_mount, t, "", AT_FDCWD, dir, MOVE_MOUNT_F_EMPTY_PATH) < 0)
		die("idmapped mount of %s", dir);
	close(t);
}

int main(void)
{
	if (getpid() != 1) {
		fprintf(stderr, "warren-vmstage runs as a microVM's PID 1 only\n");
		return 2;
	}
	must_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
	must_mount("proc", "/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL);
	must_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL);
	/*
	 * No IPv6 on the NIC (the node drops it from every sandbox link): set before its driver
	 * loads, so eth0 never does address autoconfiguration or duplicate detection.
	 */
	int v6 = open("/proc/sys/net/ipv6/conf/default/disable_ipv6", O_WRONLY | O_CLOEXEC);
	if (v6 >= 0) {
		if (write(v6, "1", 1) < 0) { /* no IPv6 in this kernel: nothing to turn off */
		}
		close(v6);
	}
	load_modules();
	if (vm_link_up("lo") < 0)
		die("loopback up");

	static char cmdline[4096];
	int cfd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (cfd < 0 || read(cfd, cmdline, sizeof cmdline - 1) < 0)
		die("read /proc/cmdline");
	close(cfd);
	int systemd = strstr(cmdline, "warren.systemd") != NULL;
	char kinds[MAX_LAYERS + 1];
	int layers = layer_kinds(cmdline, kinds, sizeof kinds);
	unsigned long shift_size, shift = id_shift(cmdline, &shift_size);
	int userns = shift ? shift_userns(shift, shift_size) : -1;
	char lower[MAX_LAYERS * 16] = { 0 };
	/* The layers mapped into the guest, read in place (DAX): none of them in its page cache. */
	int dax = strstr(cmdline, "warren.dax") != NULL, pmem = 0;
	unsigned long long pmem_at = 0;
	mkdir("/layers", 0755);
	for (int i = 0; i < layers; i++) {
		char serial[32], dev[300], data[300], dir[32], opts[320] = "";
		snprintf(serial, sizeof serial, "warren-l%d", i);
		if (dax)
			next_pmem(&pmem, &pmem_at, dev, sizeof dev);
		else if (find_disk(serial, dev, sizeof dev) < 0) {
			errno = ENODEV;
			die("no disk %s", serial);
		}
		if (kinds[i] == 'd') {
			snprintf(serial, sizeof serial, "warren-d%d", i);
			if (dax)
				next_pmem(&pmem, &pmem_at, data, sizeof data);
			else if (find_disk(serial, data, sizeof data) < 0) {
				errno = ENODEV;
				die("no disk %s", serial);
			}
			snprintf(opts, sizeof opts, "%sdevice=%s", dax ? "dax=always," : "", data);
		} else if (dax)
			snprintf(opts, sizeof opts, "dax=always");
		snprintf(dir, sizeof dir, "/layers/%d", i);
		must_mount(dev, dir, "erofs", MS_RDONLY | MS_NODEV, opts[0] ? opts : NULL);
		if (userns >= 0)
			idmap_over(dir, userns);
		/* overlay's lowerdir lists the top layer first */
		char tmp[sizeof lower];
		snprintf(tmp, sizeof tmp, "%s%s%s", dir, lower[0] ? ":" : "", lower);
		memcpy(lower, tmp, sizeof lower);
	}
	char rw[300];
	if (find_disk("warren-rw", rw, sizeof rw) == 0)
		must_mount(rw, "/rw", "ext4", MS_NODEV, "noinit_itable"); /* a fresh file: its tables are zeros */
	else
		must_mount("tmpfs", "/rw", "tmpfs", MS_NODEV, "mode=0755");
	mkdir("/rw/upper", 0755);
	mkdir("/rw/work", 0755);
	/* The mux exports it for a commit (it is out of the sandbox's sight once the root moves). */
	int rw_fd = open("/rw", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	char opts[sizeof lower + 128];
	snprintf(opts, sizeof opts, "lowerdir=%s,upperdir=/rw/upper,workdir=/rw/work", lower);
	must_mount("overlay", "/newroot", "overlay", 0, opts);

	must_mount("/platform", "/newroot/.warren", NULL, MS_BIND, NULL);
	if (mount(NULL, "/newroot/.warren", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
		die("remount /.warren read-only");
	if (mount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL) < 0 && (mkdir("/newroot/dev", 0755), mount("/dev", "/newroot/dev", NULL, MS_MOVE, NULL)) < 0)
		die("move /dev");
	must_mount("devpts", "/newroot/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620");
	must_mount("shm", "/newroot/dev/shm", "tmpfs", MS_NOSUID | MS_NOEXEC | MS_NODEV, "mode=1777");
	must_mount("proc", "/newroot/proc", "proc", MS_NOSUID | MS_NOEXEC | MS_NODEV, NULL);
	must_mount("sysfs", "/newroot/sys", "sysfs", MS_NOSUID | MS_NOEXEC | MS_NODEV | (systemd ? 0 : MS_RDONLY), NULL);

	/* The agent's port, found before the root moves (its name is in sysfs). */
	char port[300];
	if (vm_sysfs_find("/sys/class/virtio-ports", "name", "warren.agent", port, sizeof port) < 0)
		die("no virtio-serial port warren.agent");

	if (chdir("/newroot") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 || chdir("/") < 0)
		die("switch to the sandbox's root");
	sethostname("sandbox", 7);

	/*
	 * The init's socket is named in a network namespace of its own, where the mux runs and
	 * nothing of the sandbox does: a guest user cannot connect to it (and ask for root) as the
	 * mux does. The mux configures the guest's eth0 through a socket made before it left.
	 */
	int inet = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int guest_net = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	if (inet < 0 || guest_net < 0 || unshare(CLONE_NEWNET) < 0)
		die("a network namespace for the init's socket");
	int ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path + 1, VM_AGENT_NAME, strlen(VM_AGENT_NAME));
	socklen_t al = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(VM_AGENT_NAME);
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, al) < 0 || listen(ls, 128) < 0)
		die("the init's socket");

	pid_t mux = fork();
	if (mux < 0)
		die("fork the agent mux");
	if (mux == 0) {
		close(ls);
		close(guest_net);
		_exit(vm_mux_run(port, &a, al, inet, rw_fd));
	}
	/* Back in the guest's network namespace: the init and everything it runs are there. */
	if (setns(guest_net, CLONE_NEWNET) < 0)
		die("back to the guest's network namespace");
	close(guest_net);
	close(inet);
	if (rw_fd >= 0)
		close(rw_fd);
	char *envp[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "WARREN_LISTEN_FD=3", NULL };
	if (systemd) {
		pid_t init = fork();
		if (init < 0)
			die("fork warren-init");
		if (init > 0) {
			close(ls);
			char *argv[] = { "/sbin/init", NULL };
			char *sysenv[] = { "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", NULL };
			execve(argv[0], argv, sysenv);
			die("exec the image's %s", argv[0]);
		}
		setsid();
	}
	if (ls == 3 ? fcntl(3, F_SETFD, 0) < 0 : dup2(ls, 3) < 0)
		die("fd 3");
	char *argv[] = { "/.warren/warren-init", NULL };
	execve(argv[0], argv, envp);
	die("exec %s", argv[0]);
}
