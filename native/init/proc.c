/* warren-init: finding and killing a command's processes (by group, session or descent), read from /proc. */
#include "init.h"

struct pinfo {
	int pid, ppid, sid;
};

static size_t ps_scan(struct pinfo **out)
{
	size_t n = 0, cap = 0;
	struct pinfo *v = NULL;
	DIR *d = opendir("/proc");
	if (!d) {
		*out = NULL;
		return 0;
	}
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[64], b[600];
		long pid = strtol(de->d_name, NULL, 10);
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/stat", pid);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t r = read(fd, b, sizeof b - 1);
		close(fd);
		if (r <= 0)
			continue;
		b[r] = 0;
		char *rp = strrchr(b, ')');
		if (!rp)
			continue;
		/* after "(comm)": state ppid pgrp session ... */
		long nums[3];
		char *q = rp + 1;
		int k = 0;
		while (*q == ' ')
			q++;
		if (!*q)
			continue;
		q++; /* state */
		for (; k < 3; k++) {
			char *e;
			nums[k] = strtol(q, &e, 10);
			if (e == q)
				break;
			q = e;
		}
		if (k < 3)
			continue;
		int ppid = (int)nums[0], sid = (int)nums[2];
		if (n == cap) {
			cap = cap ? cap * 2 : 256;
			v = xrealloc(v, cap * sizeof *v);
		}
		v[n].pid = (int)pid;
		v[n].ppid = ppid;
		v[n].sid = sid;
		n++;
	}
	closedir(d);
	*out = v;
	return n;
}

void kill_tree(pid_t root, int sig, int flags)
{
	pid_t me = getpid();
	if (root <= 1 || root == me)
		return;
	int rounds = sig == SIGKILL ? 3 : 1;
	for (int r = 0; r < rounds; r++) {
		if (flags & KT_GROUP)
			kill(-root, sig);
		if (flags & KT_SELF)
			kill(root, sig);
		if (!(flags & (KT_DESC | KT_SID)))
			continue;
		struct pinfo *ps;
		size_t n = ps_scan(&ps);
		char *mk = xrealloc(NULL, n ? n : 1);
		memset(mk, 0, n ? n : 1);
		int *set = xrealloc(NULL, (n + 1) * sizeof(int));
		size_t ns = 0;
		set[ns++] = root;
		int changed = 1;
		while (changed) {
			changed = 0;
			for (size_t i = 0; i < n; i++) {
				if (mk[i] || ps[i].pid == root)
					continue;
				for (size_t j = 0; j < ns; j++)
					if (set[j] == ps[i].ppid) {
						mk[i] = 1;
						set[ns++] = ps[i].pid;
						changed = 1;
						break;
					}
			}
		}
		int found = 0;
		for (size_t i = 0; i < n; i++) {
			pid_t p = ps[i].pid;
			if (p <= 1 || p == me || p == root)
				continue;
			if (((flags & KT_DESC) && mk[i]) || ((flags & KT_SID) && ps[i].sid == root)) {
				kill(p, sig);
				found = 1;
			}
		}
		free(set);
		free(mk);
		free(ps);
		if (!found && r > 0)
			break;
	}
}
