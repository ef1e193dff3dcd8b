/* warren-hostd: network namespaces made and held open here for sandboxes, and their read-only sysfs. */
#include "hostd.h"

/* The network namespace this helper lives in, to come back to after making one. */
static int host_netns = -1;

/* Opens this helper's own network namespace once, to come back to: 0, or -1 with errno. */
static int own_netns(void)
{
	if (host_netns < 0 && (host_netns = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
		return -1;
	return 0;
}
#define MAX_NETNS 65536
static unsigned char netns_held[MAX_NETNS];

/*
 * A procfs of its own, mounted nowhere (fsopen/fsmount), for one namespace's sysctls; -1 when
 * the kernel cannot (then /proc is used). Through the host's /proc, the first lookup of
 * sys/net in each new network namespace walks one dcache hash chain holding an entry for every
 * namespace looked up there before: at 2,500 sandboxes that walk was a fifth of this helper's
 * time. A fresh procfs has a chain of one, and goes with its entries when closed.
 */
static int new_private_proc(void)
{
	int fs = fsopen("proc", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -1;
	int m = -1;
	if (fsconfig(fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		m = fsmount(fs, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	close(fs);
	return m;
}

/*
 * The private procfs is used for PROC_USES namespaces, then replaced: its chain stays that short,
 * and its making and its end (closing the last reference to a detached mount waits out an RCU
 * grace period, up to milliseconds of this one loop) are paid once for all of them.
 */
#define PROC_USES 32
static int private_proc(void)
{
	static int proc = -1, uses;
	if (proc < 0 || uses == PROC_USES) {
		if (proc >= 0)
			close(proc);
		proc = new_private_proc();
		uses = 0;
	}
	uses++;
	return proc;
}

/* PATH is under /proc; with a procfs fd `proc`, it is opened relative to that. */
static int write_sysctl(int proc, const char *path, const char *value)
{
	int fd = proc >= 0 ? openat(proc, path + strlen("/proc/"), O_WRONLY | O_CLOEXEC) : open(path, O_WRONLY | O_CLOEXEC);
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
	int proc = private_proc();
	for (size_t i = 0; i < sizeof NETNS_SYSCTLS / sizeof NETNS_SYSCTLS[0]; i++) {
		if (write_sysctl(proc, NETNS_SYSCTLS[i][0], NETNS_SYSCTLS[i][1]) < 0 && errno != ENOENT)
			return -1;
	}
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

void do_netns(const char *tag)
{
	if (own_netns() < 0) {
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
	netns_leave();
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

int netns_is_held(long fd)
{
	return fd >= 0 && fd < MAX_NETNS && netns_held[fd];
}

int netns_enter(int fd)
{
	return own_netns() < 0 ? -1 : setns(fd, CLONE_NEWNET);
}

void netns_leave(void)
{
	if (setns(host_netns, CLONE_NEWNET) < 0) {
		/* Stuck in the wrong namespace: nothing this helper does after could be trusted. */
		perror("warren-hostd: back to the host network namespace");
		exit(1);
	}
}

void do_netns_close(const char *tag, char **f)
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

void do_sysfs(const char *tag, char **f)
{
	int nfd = open(f[0], O_RDONLY | O_CLOEXEC);
	if (nfd < 0 || netns_enter(nfd) < 0) {
		reply_err(tag, errno, "sysfs: join network namespace");
		if (nfd >= 0)
			close(nfd);
		return;
	}
	close(nfd);
	int r = mount("sysfs", f[1], "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
	int e = errno;
	netns_leave();
	if (r < 0)
		reply_err(tag, e, "sysfs");
	else
		reply_ok(tag);
}
