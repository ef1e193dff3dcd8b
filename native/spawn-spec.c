/*
 * warren-hostd's sandbox spawner: the spawn request's KEY=VALUE fields into a spec (see spawn.c for
 * the fields). warren-hostd runs as root and acts on the spec as given, so the parser takes only
 * the shape the edge sends: numbers as plain digits of their base within range (strtoul would take
 * "-1" as all bits set, caps=-1 as every capability), paths absolute where the spawner resolves them
 * so, device names that stay in /dev. Nor does it take "every bit" spelled as digits: mount flags
 * are of the MS_* set the edge sends, capabilities the kernel's, id maps never reach host id 0, and
 * cgroup paths stay in the node's cgroup mount. Anything else is refused, naming the field.
 */
#include "spawn-internal.h"

static int push(char **arr, int *n, char *v)
{
	if (*n >= MAX_ITEMS)
		return -1;
	arr[(*n)++] = v;
	return 0;
}

/* Splits s at each SEP into at most max parts; returns the count. */
int spawn_split(char *s, char **parts, int max)
{
	int n = 0;
	parts[n++] = s;
	while (n < max && (s = strchr(s, SEP))) {
		*s++ = 0;
		parts[n++] = s;
	}
	return n;
}

/* The first n bytes of s as a number of `base` (8, 10 or 16): digits only, at least one, at most max. */
static int parse_num(const char *s, size_t n, int base, unsigned long long max, unsigned long long *out)
{
	unsigned long long v = 0;
	if (n == 0)
		return -1;
	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i], d;
		if (c >= '0' && c <= '9')
			d = c - '0';
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = c - 'a' + 10;
		else if (base == 16 && c >= 'A' && c <= 'F')
			d = c - 'A' + 10;
		else
			return -1;
		if (d >= base)
			return -1;
		if (v > (max - (unsigned long long)d) / (unsigned long long)base)
			return -1;
		v = v * (unsigned long long)base + (unsigned long long)d;
	}
	*out = v;
	return 0;
}

/* "A:B:C", three numbers each within max. */
static int parse_triple(const char *s, unsigned long long max, unsigned long long v[3])
{
	for (int i = 0; i < 3; i++) {
		size_t n = strcspn(s, ":");
		if (parse_num(s, n, 10, max, &v[i]) < 0 || s[n] != (i < 2 ? ':' : 0))
			return -1;
		s += n + 1;
	}
	return 0;
}

/*
 * An id map "IN:OUT:N": one range of N >= 1 ids, inside and outside within 32 bits, outside from 1
 * on: OUT 0 would make the sandbox's root (or a layer's files) the host's root. The edge maps each
 * sandbox to a range of its own far above (id-ranges.ts).
 */
static int idmap_ok(const char *s)
{
	unsigned long long v[3];
	if (parse_triple(s, UINT32_MAX, v) < 0)
		return -1;
	return v[1] >= 1 && v[2] >= 1 && v[0] + v[2] <= (1ULL << 32) && v[1] + v[2] <= (1ULL << 32) ? 0 : -1;
}

/*
 * The MS_* flags the edge sends (mountFlags, and MS_BIND for a bind, in
 * packages/edge/src/backends/container/spawn-spec.ts): none that remounts, moves a mount or changes
 * its propagation.
 */
#define MOUNT_FLAGS \
	(MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_SYNCHRONOUS | MS_DIRSYNC | MS_NOATIME | MS_NODIRATIME | MS_BIND | \
	 MS_REC | MS_RELATIME | MS_STRICTATIME)

/* Every capability the kernel headers know (bits 0..CAP_LAST_CAP): caps= names no bit past them. */
#define ALL_CAPS ((2ULL << CAP_LAST_CAP) - 1)

/* Where the node's cgroup v1 hierarchies are mounted: the edge's cgroup root (CgroupV1 in packages/edge/src/host/cgroups.ts). */
#define CGROUP_MOUNT "/sys/fs/cgroup/"

/*
 * The first n bytes of s, a path under CGROUP_MOUNT of at least `parts` components (a hierarchy, then
 * cgroups, then a file for a write): each a name, none empty, "." or "..", so the path stays in the
 * mount. A cgroup below the hierarchy's root: that one is never joined (it escapes every limit)
 * nor written (its release_agent is a program the kernel runs as the host's root).
 */
static int cgroup_path_ok(const char *s, size_t n, int parts)
{
	size_t pre = strlen(CGROUP_MOUNT);
	if (n <= pre || strncmp(s, CGROUP_MOUNT, pre))
		return -1;
	int found = 0;
	for (const char *p = s + pre, *end = s + n;;) {
		const char *slash = memchr(p, '/', (size_t)(end - p)), *e = slash ? slash : end;
		size_t len = (size_t)(e - p);
		if (len == 0 || (len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
			return -1;
		found++;
		if (!slash)
			break;
		p = slash + 1;
	}
	return found >= parts ? 0 : -1;
}

/* cg=DIR: a cgroup below a hierarchy's root. */
static int cg_ok(const char *v)
{
	return cgroup_path_ok(v, strlen(v), 2);
}

/* cgw=FILE=VALUE (split at the last '=', as the spawner splits it): FILE a file of a cgroup below a hierarchy's root. */
static int cgw_ok(const char *v)
{
	const char *eq = strrchr(v, '=');
	return eq && cgroup_path_ok(v, (size_t)(eq - v), 3) == 0 ? 0 : -1;
}

static int absolute(const char *s)
{
	return s[0] == '/' ? 0 : -1;
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

/* DEST^TYPE^SOURCE^FLAGS^DATA: DEST absolute, TYPE named, FLAGS a decimal mask of MOUNT_FLAGS. */
static int parse_mount(struct spec *sp, char *v)
{
	char *p[5];
	unsigned long long flags;
	if (sp->nmounts >= MAX_ITEMS || spawn_split(v, p, 5) != 5 || absolute(p[0]) < 0 || !*p[1] ||
	    parse_num(p[3], strlen(p[3]), 10, ULONG_MAX, &flags) < 0 || (flags & ~(unsigned long long)MOUNT_FLAGS))
		return -1;
	struct mnt *m = &sp->mounts[sp->nmounts++];
	m->dest = p[0];
	m->type = p[1];
	m->source = p[2];
	m->flags = (unsigned long)flags;
	m->data = p[4];
	return 0;
}

/* The flags a dir= bind may have. */
#define DIR_FLAGS (MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)

/*
 * DEST^MODE^FLAGS: DEST absolute, MODE octal (permission bits and sticky), FLAGS a decimal mask
 * of DIR_FLAGS. Kept among the mounts, in order: it is made on the mount before it.
 */
static int parse_dir(struct spec *sp, char *v)
{
	char *p[3];
	unsigned long long flags, mode;
	if (sp->nmounts >= MAX_ITEMS || spawn_split(v, p, 3) != 3 || absolute(p[0]) < 0 || !strcmp(p[0], "/") ||
	    parse_num(p[1], strlen(p[1]), 8, 01777, &mode) < 0 || parse_num(p[2], strlen(p[2]), 10, ULONG_MAX, &flags) < 0 ||
	    (flags & ~(unsigned long long)DIR_FLAGS))
		return -1;
	struct mnt *m = &sp->mounts[sp->nmounts++];
	m->dest = p[0];
	m->type = "";
	m->source = NULL;
	m->flags = (unsigned long)flags;
	m->data = p[1];
	return 0;
}

/* RES:SOFT:HARD: a resource the kernel has, soft within hard. */
static int parse_rlimit(struct spec *sp, const char *v)
{
	unsigned long long t[3];
	if (sp->nrl >= MAX_ITEMS || parse_triple(v, ULLONG_MAX, t) < 0 || t[0] >= RLIM_NLIMITS || t[1] > t[2])
		return -1;
	sp->rl[sp->nrl].res = (int)t[0];
	sp->rl[sp->nrl].soft = t[1];
	sp->rl[sp->nrl].hard = t[2];
	sp->nrl++;
	return 0;
}

/* LOWER^UPPER^WORK, none empty, no comma (it would end the overlay's option). */
static int overlay_ok(const char *v)
{
	const char *a = strchr(v, SEP), *b = a ? strchr(a + 1, SEP) : NULL;
	return b && !strchr(b + 1, SEP) && !strchr(v, ',') && a != v && b != a + 1 && b[1] ? 0 : -1;
}

/* TARGET^PATH: a target, and a path inside the root to put the link at. */
static int link_ok(const char *v)
{
	const char *s = strchr(v, SEP);
	return s && s != v && s[1] == '/' ? 0 : -1;
}

/* A node of the host's /dev: a plain name ("dev=.." would bind the host's root). */
static int dev_ok(const char *v)
{
	return *v && !strchr(v, '/') && strcmp(v, ".") && strcmp(v, "..") ? 0 : -1;
}

int spawn_parse(struct spec *sp, char **f, int n, const char **bad)
{
	memset(sp, 0, sizeof *sp);
	for (int i = 0; i < n; i++) {
		char *k = f[i], *v = strchr(k, '=');
		*bad = *k ? k : "(an empty field)";
		if (!v)
			return -1;
		*v++ = 0;
		if (!*k)
			*bad = "(a field with no name)";
		int r = 0;
		if (!strcmp(k, "root"))
			r = absolute(sp->root = v);
		else if (!strcmp(k, "sock"))
			r = absolute(sp->sock = v);
		else if (!strcmp(k, "log"))
			r = absolute(sp->log = v);
		else if (!strcmp(k, "hostname"))
			r = strlen(sp->hostname = v) > HOST_NAME_MAX ? -1 : 0;
		else if (!strcmp(k, "cwd"))
			r = absolute(sp->cwd = v);
		else if (!strcmp(k, "overlay"))
			r = overlay_ok(sp->overlay = v);
		else if (!strcmp(k, "overlaydir"))
			r = absolute(sp->overlaydir = v);
		else if (!strcmp(k, "uidmap"))
			r = idmap_ok(sp->uidmap = v);
		else if (!strcmp(k, "gidmap"))
			r = idmap_ok(sp->gidmap = v);
		else if (!strcmp(k, "layermap"))
			r = idmap_ok(sp->layermap = v);
		else if (!strcmp(k, "ns"))
			r = parse_ns(sp, v);
		else if (!strcmp(k, "netns"))
			r = absolute(sp->netns = v);
		else if (!strcmp(k, "cg"))
			r = cg_ok(v) < 0 ? -1 : push(sp->cg, &sp->ncg, v);
		else if (!strcmp(k, "cgw"))
			r = cgw_ok(v) < 0 ? -1 : push(sp->cgw, &sp->ncgw, v);
		else if (!strcmp(k, "mount"))
			r = parse_mount(sp, v);
		else if (!strcmp(k, "dev"))
			r = dev_ok(v) < 0 ? -1 : push(sp->devs, &sp->ndevs, v);
		else if (!strcmp(k, "link"))
			r = link_ok(v) < 0 ? -1 : push(sp->links, &sp->nlinks, v);
		else if (!strcmp(k, "dir"))
			r = parse_dir(sp, v);
		else if (!strcmp(k, "maskdir"))
			r = absolute(sp->maskdir = v);
		else if (!strcmp(k, "mask"))
			r = absolute(v) < 0 ? -1 : push(sp->masks, &sp->nmasks, v);
		else if (!strcmp(k, "ro"))
			r = absolute(v) < 0 ? -1 : push(sp->ros, &sp->nros, v);
		else if (!strcmp(k, "rlimit"))
			r = parse_rlimit(sp, v);
		else if (!strcmp(k, "caps")) {
			unsigned long long caps = 0;
			r = parse_num(v, strlen(v), 16, ALL_CAPS, &caps);
			sp->caps = caps;
			sp->have_caps = 1;
		} else if (!strcmp(k, "nnp")) {
			sp->nnp = !strcmp(v, "1");
			r = sp->nnp || !strcmp(v, "0") ? 0 : -1;
		} else if (!strcmp(k, "env"))
			/* NAME=VALUE: a name, then its value (maybe empty). */
			r = *v == '=' || !strchr(v, '=') ? -1 : push(sp->env, &sp->nenv, v);
		else if (!strcmp(k, "arg"))
			r = push(sp->argv, &sp->nargv, v);
		else
			return -1;
		if (r < 0)
			return -1;
	}
	*bad = "root, sock, log, uidmap, gidmap, arg and cwd are required; ns must include user, mnt and pid";
	if (!sp->root || !sp->sock || !sp->log || !sp->uidmap || !sp->gidmap || !sp->cwd || sp->nargv == 0 ||
	    (sp->clone_flags & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)) != (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID))
		return -1;
	*bad = "arg 0 is the program, an absolute path inside the root";
	if (absolute(sp->argv[0]) < 0)
		return -1;
	*bad = "netns (join a network namespace) and a new one (ns=net) exclude each other";
	if (sp->netns && (sp->clone_flags & CLONE_NEWNET))
		return -1;
	sp->env[sp->nenv] = NULL;
	sp->argv[sp->nargv] = NULL;
	return 0;
}
