/*
 * What a spawn spec warren-hostd accepted must be, checked from the request's own text (before
 * the parser cut it up), independently of the parser: shared by its unit test and its fuzzer.
 * Every pointer lies in the request; lists are bounded and ended; paths are absolute where the
 * spawner needs them so; every number is plain digits of its base within its range (no sign,
 * space, 0x or overflow: strtoul would take "-1" as all bits, and caps=-1 as every capability),
 * and no number is "every bit" in digits either: mount flags are of the edge's MS_* set, caps of
 * the kernel's capabilities, no id map reaches host id 0; cgroup paths stay in /sys/fs/cgroup/,
 * below a hierarchy's root.
 */
#ifndef WARREN_SPEC_CHECK_H
#define WARREN_SPEC_CHECK_H

#include "../spawn-internal.h"

/* Digits of `base` only, at least one, within max: the value, or -1 (as an unsigned, checked by ok). */
static int spec_digits(const char *s, size_t n, int base, unsigned long long max, unsigned long long *out)
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
		if (d >= base || v > (max - (unsigned long long)d) / (unsigned long long)base)
			return -1;
		v = v * (unsigned long long)base + (unsigned long long)d;
	}
	*out = v;
	return 0;
}

/* "A:B:C" of digits, each within max, in the original text (ended by a TAB or its end): its values. */
static int spec_triple(const char *s, unsigned long long max, unsigned long long v[3])
{
	for (int i = 0; i < 3; i++) {
		size_t n = strcspn(s, ":\t");
		if (spec_digits(s, n, 10, max, &v[i]) < 0 || (i < 2 ? s[n] != ':' : s[n] != 0 && s[n] != '\t'))
			return -1;
		s += n + 1;
	}
	return 0;
}

/* An id map "IN:OUT:N": one range of N >= 1 ids, within 32 bits, OUT never the host's root. */
static int spec_idmap_ok(const char *orig)
{
	unsigned long long v[3];
	return spec_triple(orig, UINT32_MAX, v) == 0 && v[1] != 0 && v[2] >= 1 && v[0] + v[2] <= (1ULL << 32) && v[1] + v[2] <= (1ULL << 32);
}

/* The MS_* flags the edge's mountFlags can make (packages/edge/src/backends/container/spawn-spec.ts). */
static const unsigned long spec_mount_flags[] = { MS_RDONLY,   MS_NOSUID, MS_NODEV, MS_NOEXEC,   MS_SYNCHRONOUS, MS_DIRSYNC,
						  MS_NOATIME,  MS_NODIRATIME, MS_BIND, MS_REC, MS_RELATIME, MS_STRICTATIME };

static int spec_flags_ok(unsigned long flags)
{
	for (size_t i = 0; i < sizeof spec_mount_flags / sizeof spec_mount_flags[0]; i++)
		flags &= ~spec_mount_flags[i];
	return flags == 0;
}

/*
 * The first n bytes of p: "/sys/fs/cgroup/" then at least `parts` names joined by single slashes,
 * none "." or "..".
 */
static int spec_cgroup_ok(const char *p, size_t n, int parts)
{
	char t[PATH_MAX + 2];
	const char *pre = "/sys/fs/cgroup/";
	if (n > PATH_MAX || n < strlen(pre) || memcmp(p, pre, strlen(pre)))
		return 0;
	/* The rest between slashes, so each name is "/NAME/" in it. */
	t[0] = '/';
	memcpy(t + 1, p + strlen(pre), n - strlen(pre));
	t[n - strlen(pre) + 1] = '/';
	t[n - strlen(pre) + 2] = 0;
	int slashes = 0;
	for (const char *c = t; *c; c++)
		slashes += *c == '/';
	return strlen(t) > 2 && !strstr(t, "//") && !strstr(t, "/./") && !strstr(t, "/../") && slashes - 1 >= parts;
}

#define SPEC_IN(p) ((p) >= line && (p) <= line + n)
#define SPEC_ORIG(p) (orig + ((p) - line))

/*
 * Whether `sp`, parsed from `line` (n bytes, cut up in place), holds what `orig` (the same bytes
 * before parsing) says, in the shape the spawner relies on. Returns the name of the first broken
 * property, or NULL.
 */
static const char *spec_check(const struct spec *sp, const char *line, const char *orig, size_t n)
{
	const char *req[] = { sp->root, sp->sock, sp->log, sp->cwd };
	for (int i = 0; i < 4; i++)
		if (!req[i] || !SPEC_IN(req[i]) || req[i][0] != '/')
			return "root, sock, log and cwd are absolute paths";
	if (!sp->uidmap || !sp->gidmap || !SPEC_IN(sp->uidmap) || !SPEC_IN(sp->gidmap) || !spec_idmap_ok(SPEC_ORIG(sp->uidmap)) ||
	    !spec_idmap_ok(SPEC_ORIG(sp->gidmap)) || (sp->layermap && (!SPEC_IN(sp->layermap) || !spec_idmap_ok(SPEC_ORIG(sp->layermap)))))
		return "id maps are IN:OUT:N within 32 bits, OUT >= 1";
	if ((sp->clone_flags & (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID)) != (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID))
		return "ns holds user, mnt and pid";
	if (sp->netns && (!SPEC_IN(sp->netns) || sp->netns[0] != '/' || (sp->clone_flags & CLONE_NEWNET)))
		return "netns is a path, not with ns=net";
	if (sp->hostname && (!SPEC_IN(sp->hostname) || strlen(sp->hostname) > HOST_NAME_MAX))
		return "hostname fits";
	if (sp->overlaydir && (!SPEC_IN(sp->overlaydir) || sp->overlaydir[0] != '/'))
		return "overlaydir is absolute";
	if (sp->overlay) {
		const char *a = SPEC_IN(sp->overlay) ? strchr(sp->overlay, SEP) : NULL, *b = a ? strchr(a + 1, SEP) : NULL;
		if (!b || strchr(b + 1, SEP) || strchr(sp->overlay, ',') || a == sp->overlay || b == a + 1 || !b[1])
			return "overlay is LOWER^UPPER^WORK, none empty, no comma";
	}
	int counts[] = { sp->ncg, sp->ncgw, sp->nmounts, sp->ndevs, sp->nlinks, sp->nmasks, sp->nros, sp->nrl, sp->nenv, sp->nargv };
	for (int i = 0; i < 10; i++)
		if (counts[i] < 0 || counts[i] > MAX_ITEMS)
			return "lists are within MAX_ITEMS";
	if (sp->nargv < 1 || sp->argv[sp->nargv] || sp->env[sp->nenv] || !SPEC_IN(sp->argv[0]) || sp->argv[0][0] != '/')
		return "argv has an absolute program; argv and env are NULL-ended";
	for (int i = 0; i < sp->nargv; i++)
		if (!SPEC_IN(sp->argv[i]))
			return "argv lies in the request";
	for (int i = 0; i < sp->nenv; i++)
		if (!SPEC_IN(sp->env[i]) || sp->env[i][0] == '=' || !strchr(sp->env[i], '='))
			return "env entries are NAME=VALUE";
	for (int i = 0; i < sp->ncg; i++)
		if (!SPEC_IN(sp->cg[i]) || !spec_cgroup_ok(sp->cg[i], strlen(sp->cg[i]), 2))
			return "cg directories are cgroups in /sys/fs/cgroup/HIERARCHY/, no . or ..";
	for (int i = 0; i < sp->ncgw; i++)
		if (!SPEC_IN(sp->cgw[i]) || !strchr(sp->cgw[i], '=') || !spec_cgroup_ok(sp->cgw[i], (size_t)(strrchr(sp->cgw[i], '=') - sp->cgw[i]), 3))
			return "cgw is FILE=VALUE, FILE in a cgroup in /sys/fs/cgroup/HIERARCHY/, no . or ..";
	for (int i = 0; i < sp->nmasks; i++)
		if (!SPEC_IN(sp->masks[i]) || sp->masks[i][0] != '/')
			return "masks are absolute";
	for (int i = 0; i < sp->nros; i++)
		if (!SPEC_IN(sp->ros[i]) || sp->ros[i][0] != '/')
			return "ro paths are absolute";
	for (int i = 0; i < sp->ndevs; i++)
		if (!SPEC_IN(sp->devs[i]) || !sp->devs[i][0] || strchr(sp->devs[i], '/') || !strcmp(sp->devs[i], ".") || !strcmp(sp->devs[i], ".."))
			return "dev names a node in /dev (dev=.. would bind the host's root)";
	for (int i = 0; i < sp->nlinks; i++) {
		const char *s = SPEC_IN(sp->links[i]) ? strchr(sp->links[i], SEP) : NULL;
		if (!s || s == sp->links[i] || s[1] != '/')
			return "link is TARGET^PATH, PATH absolute";
	}
	if (sp->maskdir && (!SPEC_IN(sp->maskdir) || sp->maskdir[0] != '/'))
		return "maskdir is absolute";
	for (int i = 0; i < sp->nmounts; i++) {
		const struct mnt *m = &sp->mounts[i];
		unsigned long long flags, mode;
		if (m->type && !m->type[0]) {
			/* dir=DEST^MODE^FLAGS */
			if (!SPEC_IN(m->dest) || !SPEC_IN(m->data) || m->source || m->dest[0] != '/' || !m->dest[1] ||
			    spec_digits(SPEC_ORIG(m->data), strlen(m->data), 8, 01777, &mode) < 0)
				return "dir is DEST^MODE^FLAGS, DEST absolute and not /, MODE octal within 1777";
			if (m->flags & ~(unsigned long)(MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC))
				return "dir FLAGS are ro, nosuid, nodev and noexec only";
			continue;
		}
		if (!SPEC_IN(m->dest) || !SPEC_IN(m->data) || m->dest[0] != '/' || !m->type[0] || m->data < m->source)
			return "mount is DEST^TYPE^SOURCE^FLAGS^DATA, DEST absolute";
		const char *ft = m->source + strlen(m->source) + 1;
		if (spec_digits(SPEC_ORIG(ft), (size_t)(m->data - 1 - ft), 10, ULONG_MAX, &flags) < 0 || flags != m->flags)
			return "mount FLAGS are decimal digits";
		if (!spec_flags_ok(m->flags))
			return "mount FLAGS are of the MS_* flags the edge sends";
	}
	for (int i = 0; i < sp->nrl; i++)
		if (sp->rl[i].res < 0 || sp->rl[i].res >= RLIM_NLIMITS || sp->rl[i].soft > sp->rl[i].hard)
			return "rlimit is RES:SOFT:HARD, RES known, SOFT <= HARD";
	/* The numbers of the request text, in order: each accepted one is plain digits and is what was stored. */
	int rl = 0, caps = -1;
	unsigned long long capv = 0;
	for (const char *f = orig; f < orig + n; f += strcspn(f, "\t") + 1) {
		size_t len = strcspn(f, "\t");
		unsigned long long v[3];
		if (len > 7 && !strncmp(f, "rlimit=", 7)) {
			/* Read where it is (spec_triple stops at the field's TAB): a number's leading zeros make it as long as they like. */
			if (rl >= sp->nrl || spec_triple(f + 7, ULLONG_MAX, v) < 0 || v[0] != (unsigned long long)sp->rl[rl].res || v[1] != sp->rl[rl].soft ||
			    v[2] != sp->rl[rl].hard)
				return "rlimit is RES:SOFT:HARD of decimal digits";
			rl++;
		} else if (len >= 5 && !strncmp(f, "caps=", 5)) {
			caps = spec_digits(f + 5, len - 5, 16, ~0ULL, &capv);
		} else if (len >= 4 && !strncmp(f, "nnp=", 4) && (len != 5 || (f[4] != '0' && f[4] != '1'))) {
			return "nnp is 0 or 1";
		}
	}
	if (sp->have_caps && (caps < 0 || capv != sp->caps))
		return "caps are hex digits (caps=-1 is every capability)";
	if (sp->have_caps && (sp->caps >> CAP_LAST_CAP) > 1)
		return "caps name no bit past CAP_LAST_CAP";
	return NULL;
}

#undef SPEC_IN
#undef SPEC_ORIG

#endif
