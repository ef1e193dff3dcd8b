/*
 * Unit tests of warren-hostd's spawn spec parser (spawn-spec.c), which runs as root: the spec the
 * edge sends parses to what it says; every malformed field is refused and named. Built with ASan
 * and UBSan and run by `make -C native check`; fuzz/fuzz-spawn-spec.c fuzzes the same parser
 * against the same properties (spec-check.h).
 */
#include "spec-check.h"

static int failures;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                   \
		}                                                                     \
	} while (0)

/* What the edge sends for a container sandbox (spawnFields in packages/edge/src/backends/container/spawn-spec.ts). */
static const char *const EDGE[] = {
	"root=/d/rootfs",
	"sock=/d/init.sock",
	"log=/d/init.log",
	"ns=pid,net,ipc,uts,mnt,user,cgroup",
	"uidmap=0:100000:65536",
	"gidmap=0:100000:65536",
	"overlay=a:b\x1f" "/d/up\x1f" "/d/work",
	"overlaydir=/l",
	"layermap=200000:100000:65536",
	"hostname=sandbox",
	"cg=/sys/fs/cgroup/memory/own/warren/sb_1",
	"cg=/sys/fs/cgroup/cpu/own/warren/sb_1",
	"cg=/sys/fs/cgroup/cpuacct/own/warren/sb_1",
	"cg=/sys/fs/cgroup/pids/own/warren/sb_1",
	"cg=/sys/fs/cgroup/freezer/own/warren/sb_1",
	"cg=/sys/fs/cgroup/devices/own/warren/sb_1",
	"cgw=/sys/fs/cgroup/memory/own/warren/sb_1/memory.limit_in_bytes=67108864",
	"cgw=/sys/fs/cgroup/cpu/own/warren/sb_1/cpu.cfs_quota_us=50000",
	"cgw=/sys/fs/cgroup/pids/own/warren/sb_1/pids.max=100",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.deny=a",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 1:3 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 1:5 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 1:7 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 1:8 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 1:9 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 5:0 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 5:2 rwm",
	"cgw=/sys/fs/cgroup/devices/own/warren/sb_1/devices.allow=c 136:* rwm",
	"mount=/proc\x1f" "proc\x1f" "proc\x1f" "14\x1f" "",
	"mount=/dev\x1f" "tmpfs\x1f" "tmpfs\x1f" "16777218\x1f" "mode=755,size=65536k",
	"mount=/dev/pts\x1f" "devpts\x1f" "devpts\x1f" "10\x1f" "newinstance,ptmxmode=0666,mode=0620",
	"dir=/dev/shm\x1f" "1777\x1f" "14",
	"mount=/dev/mqueue\x1f" "mqueue\x1f" "mqueue\x1f" "14\x1f" "",
	"mount=/sys\x1f" "sysfs\x1f" "sysfs\x1f" "15\x1f" "",
	"mount=/.warren\x1f" "none\x1f" "/p\x1f" "4103\x1f" "",
	"dev=null",
	"dev=zero",
	"dev=full",
	"dev=random",
	"dev=urandom",
	"dev=tty",
	"link=/proc/self/fd\x1f" "/dev/fd",
	"link=/proc/self/fd/0\x1f" "/dev/stdin",
	"link=/proc/self/fd/1\x1f" "/dev/stdout",
	"link=/proc/self/fd/2\x1f" "/dev/stderr",
	"link=pts/ptmx\x1f" "/dev/ptmx",
	"maskdir=/d/mnt/empty",
	"mask=/proc/acpi",
	"mask=/proc/asound",
	"mask=/proc/kcore",
	"mask=/proc/keys",
	"mask=/proc/latency_stats",
	"mask=/proc/timer_list",
	"mask=/proc/timer_stats",
	"mask=/proc/sched_debug",
	"mask=/proc/scsi",
	"mask=/proc/kpagecgroup",
	"mask=/proc/kpageflags",
	"mask=/proc/kpagecount",
	"mask=/sys/firmware",
	"mask=/sys/devices/virtual/powercap",
	"mask=/sys/kernel/debug",
	"mask=/sys/fs/cgroup",
	"ro=/proc/bus",
	"ro=/proc/fs",
	"ro=/proc/irq",
	"ro=/proc/sys",
	"ro=/proc/sysrq-trigger",
	"rlimit=7:4096:4096",
	"caps=a80425fb",
	"nnp=1",
	"cwd=/",
	"env=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"env=WARREN_LISTEN_FD=3",
	"arg=/.warren/warren-init",
};
#define NEDGE ((int)(sizeof EDGE / sizeof EDGE[0]))

/* A request: the fields as one TAB-joined line, cut up as warren-hostd cuts it. */
struct req {
	char line[16384], orig[16384];
	char *f[256];
	int n;
	size_t len;
};

static void build(struct req *r, const char *const *fields, int n)
{
	r->len = 0;
	for (int i = 0; i < n; i++)
		r->len += (size_t)snprintf(r->line + r->len, sizeof r->line - r->len, "%s%s", i ? "\t" : "", fields[i]);
	memcpy(r->orig, r->line, r->len + 1);
	r->n = 0;
	for (char *p = r->line;;) {
		r->f[r->n++] = p;
		char *t = strchr(p, '\t');
		if (!t)
			break;
		*t = 0;
		p = t + 1;
	}
}

static struct spec sp;

static void test_edge_spec(void)
{
	struct req r;
	const char *bad = NULL;
	build(&r, EDGE, NEDGE);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == 0);
	CHECK(spec_check(&sp, r.line, r.orig, r.len) == NULL);
	CHECK(!strcmp(sp.root, "/d/rootfs") && !strcmp(sp.cwd, "/") && !strcmp(sp.argv[0], "/.warren/warren-init") && sp.nargv == 1);
	CHECK(sp.have_caps && sp.caps == 0xa80425fbULL && sp.nnp == 1);
	CHECK(sp.nrl == 1 && sp.rl[0].res == RLIMIT_NOFILE && sp.rl[0].soft == 4096 && sp.rl[0].hard == 4096);
	CHECK(sp.nmounts == 7 && !strcmp(sp.mounts[6].dest, "/.warren") && sp.mounts[6].flags == 4103 && !strcmp(sp.mounts[6].data, ""));
	/* dir=: kept in order among the mounts, no type or source, its mode as data. */
	CHECK(!strcmp(sp.mounts[3].dest, "/dev/shm") && !strcmp(sp.mounts[3].type, "") && sp.mounts[3].source == NULL &&
	      !strcmp(sp.mounts[3].data, "1777") && sp.mounts[3].flags == 14);
	CHECK(sp.maskdir && !strcmp(sp.maskdir, "/d/mnt/empty"));
	CHECK(sp.nenv == 2 && !strcmp(sp.env[1], "WARREN_LISTEN_FD=3") && sp.env[2] == NULL);
	CHECK(sp.ndevs == 6 && sp.nlinks == 5 && sp.ncg == 6 && sp.ncgw == 12);
	CHECK((sp.clone_flags & CLONE_NEWNET) && sp.cgroupns && !strcmp(sp.layermap, "200000:100000:65536"));
}

/* The edge's spec with `field` added (or, when its key is single-valued, put last to win): refused, naming `key`. */
static void refused(const char *field, const char *key)
{
	const char *fields[NEDGE + 1];
	struct req r;
	const char *bad = NULL;
	/* Before arg (the last field), so a bad arg or env is still an arg or env. */
	for (int i = 0; i < NEDGE - 1; i++)
		fields[i] = EDGE[i];
	fields[NEDGE - 1] = field;
	fields[NEDGE] = EDGE[NEDGE - 1];
	build(&r, fields, NEDGE + 1);
	int got = spawn_parse(&sp, r.f, r.n, &bad);
	if (got == 0 || !bad || strcmp(bad, key)) {
		fprintf(stderr, "field %s: parse %d, named \"%s\" (want %s)\n", field, got, bad ? bad : "(null)", key);
		failures++;
	}
}

static void test_bad_fields(void)
{
	/* Numbers: digits of their base only, within range; strtoul took "-1" as every bit. */
	refused("caps=-1", "caps");
	refused("caps=0x1f", "caps");
	refused("caps= 1f", "caps");
	refused("caps=", "caps");
	refused("caps=10000000000000000", "caps");
	refused("rlimit=7:-1:4096", "rlimit");
	refused("rlimit=7:1:2junk", "rlimit");
	refused("rlimit=7:1", "rlimit");
	refused("rlimit=99:1:1", "rlimit");
	refused("rlimit=-1:1:1", "rlimit");
	refused("rlimit=7:5:4", "rlimit");
	refused("rlimit=7:1:18446744073709551616", "rlimit");
	refused("mount=/x\x1fnone\x1f/y\x1f-1\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "4103x\x1f", "mount");
	refused("mount=x\x1fnone\x1f/y\x1f" "0\x1f", "mount");
	refused("mount=/x\x1f\x1f/y\x1f" "0\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "0", "mount");
	refused("uidmap=-1:0:1", "uidmap");
	refused("uidmap=0:100000:0", "uidmap");
	refused("uidmap=0:4294967295:2", "uidmap");
	refused("uidmap=0:100000:65536:1", "uidmap");
	refused("gidmap=1:2", "gidmap");
	refused("layermap=a:b:c", "layermap");
	/* "Every bit" spelled as plain digits: the sandbox's root as the host's, a layer's files as the host root's. */
	refused("uidmap=0:0:1", "uidmap");
	refused("gidmap=0:0:65536", "gidmap");
	refused("layermap=200000:0:65536", "layermap");
	/* Mount flags of the edge's MS_* set only: not ULONG_MAX, MS_REMOUNT, MS_MOVE, MS_SHARED, MS_PRIVATE or MS_LAZYTIME. */
	refused("mount=/x\x1fnone\x1f/y\x1f" "18446744073709551615\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "4128\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "8192\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "1048576\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "266240\x1f", "mount");
	refused("mount=/x\x1fnone\x1f/y\x1f" "33554432\x1f", "mount");
	/* Capabilities past the kernel's last one. */
	refused("caps=ffffffffffffffff", "caps");
	static char past_last[32];
	snprintf(past_last, sizeof past_last, "caps=%llx", 1ULL << (CAP_LAST_CAP + 1));
	refused(past_last, "caps");
	/* cgroup paths in the node's cgroup mount, below a hierarchy's root, no way out of it. */
	refused("cg=/etc/x", "cg");
	refused("cgw=/etc/ld.so.preload=/tmp/evil.so", "cgw");
	refused("cg=/sys/fs/cgroup/../../etc", "cg");
	refused("cg=/sys/fs/cgroup/memory/../../../etc", "cg");
	refused("cg=/sys/fs/cgroup/memory/own/..", "cg");
	refused("cg=/sys/fs/cgroup/memory", "cg");
	refused("cg=/sys/fs/cgroup/", "cg");
	refused("cg=/sys/fs/cgroup", "cg");
	refused("cg=/sys/fs/cgroupx/memory/own", "cg");
	refused("cg=/sys/fs/cgroup//memory/own", "cg");
	refused("cg=/sys/fs/cgroup/./memory", "cg");
	refused("cg=/sys/fs/cgroup/memory/own/", "cg");
	refused("cgw=/sys/fs/cgroup/memory/release_agent=/tmp/evil", "cgw");
	refused("cgw=/sys/fs/cgroup/memory/own/../release_agent=/tmp/evil", "cgw");
	refused("cgw=/sys/fs/cgroup/memory/own/../../../../etc/ld.so.preload=/tmp/evil.so", "cgw");
	refused("cgw=/sys/fs/cgroup/memory/own/x=1/../../release_agent=/tmp/evil", "cgw");
	refused("nnp=yes", "nnp");
	refused("nnp=2", "nnp");
	/* Paths the spawner resolves as absolute, names that stay where they belong. */
	refused("dev=..", "dev");
	refused("dev=.", "dev");
	refused("dev=a/b", "dev");
	refused("dev=", "dev");
	refused("link=nosep", "link");
	refused("link=\x1f/dev/x", "link");
	refused("link=t\x1frelative", "link");
	refused("env=NOEQUALS", "env");
	refused("env==x", "env");
	refused("hostname=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "hostname");
	refused("cwd=relative", "cwd");
	refused("root=relative", "root");
	refused("sock=s", "sock");
	refused("log=l", "log");
	refused("overlay=a\x1f/u", "overlay");
	refused("overlay=a,b\x1f/u\x1f/w", "overlay");
	refused("overlay=a\x1f\x1f/w", "overlay");
	refused("overlay=a\x1f/u\x1f/w\x1f/x", "overlay");
	refused("overlaydir=l", "overlaydir");
	refused("cg=relative", "cg");
	refused("cgw=/no/value", "cgw");
	refused("cgw=relative=1", "cgw");
	refused("mask=relative", "mask");
	refused("maskdir=relative", "maskdir");
	/* dir=DEST^MODE^FLAGS: absolute, not the root, an octal mode within 1777, only ro, nosuid, nodev and noexec. */
	refused("dir=relative\x1f" "1777\x1f" "14", "dir");
	refused("dir=/\x1f" "1777\x1f" "14", "dir");
	refused("dir=/x\x1f" "0779\x1f" "14", "dir");
	refused("dir=/x\x1f" "4777\x1f" "14", "dir");
	refused("dir=/x\x1f" "\x1f" "14", "dir");
	refused("dir=/x\x1f" "1777\x1f" "4110", "dir");
	refused("dir=/x\x1f" "1777\x1f" "-1", "dir");
	refused("dir=/x\x1f" "1777", "dir");
	refused("dir=/x\x1f" "1777\x1f" "14\x1f", "dir");
	refused("ro=relative", "ro");
	refused("netns=relative", "netns");
	refused("ns=user,mnt,pid,bogus", "ns");
	refused("unknown=1", "unknown");
	refused("noequals", "noequals");
	refused("", "(an empty field)");
	refused("=value", "(a field with no name)");
}

static void test_limits(void)
{
	/* MAX_ITEMS of a repeated field, then one more. */
	static char cgs[MAX_ITEMS + 1][48];
	const char *fields[MAX_ITEMS + 16];
	int n = 0;
	const char *base[] = { "root=/r", "sock=/s", "log=/l", "ns=user,mnt,pid", "uidmap=0:1000:1", "gidmap=0:1000:1", "cwd=/" };
	for (int i = 0; i < 7; i++)
		fields[n++] = base[i];
	for (int i = 0; i < MAX_ITEMS; i++) {
		snprintf(cgs[i], sizeof cgs[i], "cg=/sys/fs/cgroup/pids/%d", i);
		fields[n++] = cgs[i];
	}
	fields[n++] = "arg=/bin/init";
	struct req r;
	const char *bad = NULL;
	build(&r, fields, n);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == 0 && sp.ncg == MAX_ITEMS && spec_check(&sp, r.line, r.orig, r.len) == NULL);
	fields[n - 1] = "cg=/sys/fs/cgroup/pids/one-more";
	fields[n++] = "arg=/bin/init";
	build(&r, fields, n);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == -1 && !strcmp(bad, "cg"));
	/* Required fields, and what goes with what. */
	build(&r, base, 7);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == -1 && strstr(bad, "are required"));
	const char *rel[] = { "root=/r", "sock=/s", "log=/l", "ns=user,mnt,pid", "uidmap=0:1000:1", "gidmap=0:1000:1", "cwd=/", "arg=init" };
	build(&r, rel, 8);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == -1 && strstr(bad, "absolute"));
	const char *both[] = { "root=/r", "sock=/s", "log=/l", "ns=user,mnt,pid,net", "netns=/proc/1/ns/net", "uidmap=0:1000:1", "gidmap=0:1000:1", "cwd=/", "arg=/i" };
	build(&r, both, 9);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == -1 && strstr(bad, "exclude"));
	const char *nopid[] = { "root=/r", "sock=/s", "log=/l", "ns=user,mnt", "uidmap=0:1000:1", "gidmap=0:1000:1", "cwd=/", "arg=/i" };
	build(&r, nopid, 8);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == -1 && strstr(bad, "ns must include"));
	/* The largest numbers are taken: an unlimited rlimit, every capability the kernel has, every MS_* flag
	 * the edge sends (MS_RDONLY..MS_STRICTATIME), the lowest and highest host ids but 0. */
	char all_caps[32];
	snprintf(all_caps, sizeof all_caps, "caps=%llX", (2ULL << CAP_LAST_CAP) - 1);
	const unsigned long all_flags = MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_SYNCHRONOUS | MS_DIRSYNC | MS_NOATIME | MS_NODIRATIME |
					MS_BIND | MS_REC | MS_RELATIME | MS_STRICTATIME;
	char flags_mount[64];
	snprintf(flags_mount, sizeof flags_mount, "mount=/x\x1fnone\x1f/y\x1f%lu\x1f", all_flags);
	const char *big[] = { "root=/r", "sock=/s", "log=/l", "ns=user,mnt,pid", "uidmap=0:4294967295:1", "gidmap=4294967295:1:1", "cwd=/",
			      "rlimit=0:18446744073709551615:18446744073709551615", all_caps, flags_mount,
			      "cg=/sys/fs/cgroup/memory/warren", "cgw=/sys/fs/cgroup/memory/warren/a=b/memory.limit_in_bytes=1", "arg=/i" };
	build(&r, big, 13);
	CHECK(spawn_parse(&sp, r.f, r.n, &bad) == 0 && sp.rl[0].hard == ULLONG_MAX && sp.caps == (2ULL << CAP_LAST_CAP) - 1 &&
	      sp.mounts[0].flags == all_flags && spec_check(&sp, r.line, r.orig, r.len) == NULL);
}

int main(void)
{
	test_edge_spec();
	test_bad_fields();
	test_limits();
	if (failures) {
		fprintf(stderr, "spawn-spec-test: %d failures\n", failures);
		return 1;
	}
	printf("spawn-spec-test: ok\n");
	return 0;
}
