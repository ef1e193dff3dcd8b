/* warren-hostd's sandbox spawner: the spawn request's KEY=VALUE fields into a spec (see spawn.c for the fields). */
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

int spawn_parse(struct spec *sp, char **f, int n, const char **bad)
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
			if (sp->nmounts >= MAX_ITEMS || spawn_split(v, p, 5) != 5 || p[0][0] != '/')
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
