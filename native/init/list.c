/* warren-init: directory listings (`L`), streamed a batch of entries at a time. */
#include "init.h"

struct lframe {
	int fd, depth;
	char *path;
	char *blob;
	char **names;
	size_t cnt, idx;
};

struct lst {
	struct lframe *st;
	int top, cap, maxd;
	size_t total;
};

static char dents[32768];

static int lcmp(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void lframe_free(struct lframe *fr)
{
	if (fr->fd >= 0)
		close(fr->fd);
	free(fr->path);
	free(fr->blob);
	free(fr->names);
	memset(fr, 0, sizeof *fr);
	fr->fd = -1;
}

void lst_free(struct lst *ls)
{
	for (int i = 0; i < ls->top; i++)
		lframe_free(&ls->st[i]);
	free(ls->st);
	free(ls);
}

/* Push a directory (takes fd, path). Returns 0 or errno. */
static int lst_push(struct lst *ls, int fd, char *path, int depth)
{
	buf_t blob = {0};
	size_t cnt = 0;
	int err = 0;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, dents, sizeof dents);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = errno;
			break;
		}
		if (n == 0)
			break;
		for (long o = 0; o < n;) {
			struct linux_dirent64 *de = (struct linux_dirent64 *)(dents + o);
			o += de->d_reclen;
			const char *nm = de->d_name;
			if (!strcmp(nm, ".") || !strcmp(nm, ".."))
				continue;
			if (ls->total + cnt + 1 > L_MAX_ENTRIES) {
				err = E2BIG;
				goto out;
			}
			bappend(&blob, nm, strlen(nm) + 1);
			cnt++;
		}
	}
out:
	if (err) {
		bfree(&blob);
		close(fd);
		free(path);
		return err;
	}
	ls->total += cnt;
	if (ls->top == ls->cap) {
		ls->cap = ls->cap ? ls->cap * 2 : 8;
		ls->st = xrealloc(ls->st, (size_t)ls->cap * sizeof *ls->st);
	}
	struct lframe *fr = &ls->st[ls->top++];
	memset(fr, 0, sizeof *fr);
	fr->fd = fd;
	fr->depth = depth;
	fr->path = path;
	fr->blob = blob.d;
	fr->cnt = cnt;
	fr->names = xrealloc(NULL, (cnt ? cnt : 1) * sizeof(char *));
	char *q = blob.d;
	for (size_t i = 0; i < cnt; i++) {
		fr->names[i] = q;
		q += strlen(q) + 1;
	}
	qsort(fr->names, cnt, sizeof(char *), lcmp);
	return 0;
}

static char *pjoin(const char *dir, const char *name)
{
	size_t a = strlen(dir), b = strlen(name);
	char *r = xrealloc(NULL, a + b + 2);
	memcpy(r, dir, a);
	if (!(a == 1 && dir[0] == '/'))
		r[a++] = '/';
	memcpy(r + a, name, b + 1);
	return r;
}

void op_list(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	const field_t *df = fget(f, nf, 'd');
	unsigned long long d = 1;
	if (!p || (df && df->n && fnum(df, 10, ULLONG_MAX / 16, &d) < 0) || d < 1) {
		free(p);
		conn_fail(c, EINVAL, "list: invalid request");
		return;
	}
	int fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		conn_fail(c, e, "list %s: %s", p, strerror(e));
		free(p);
		return;
	}
	struct lst *ls = xrealloc(NULL, sizeof *ls);
	memset(ls, 0, sizeof *ls);
	ls->maxd = d > L_MAX_DEPTH ? L_MAX_DEPTH : (int)d;
	int e = lst_push(ls, fd, p, 1);
	if (e) {
		lst_free(ls);
		conn_fail(c, e, "list: %s", strerror(e));
		return;
	}
	c->ls = ls;
}

int list_pump(struct conn *c)
{
	struct lst *ls = c->ls;
	for (int i = 0; i < 2048; i++) {
		if (!clive(c) || !c->ls || bused(&c->out) >= HIGH_WATER)
			return 0;
		if (ls->top == 0) {
			conn_done(c);
			return 0;
		}
		struct lframe *fr = &ls->st[ls->top - 1];
		if (fr->idx == fr->cnt) {
			lframe_free(fr);
			ls->top--;
			continue;
		}
		const char *nm = fr->names[fr->idx++];
		struct stat st;
		if (fstatat(fr->fd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		char *cp = pjoin(fr->path, nm);
		fb_entry(cp, nm, &st, fr->fd, nm);
		conn_send(c, REPLY_ENTRY, fb.d, fb.len);
		if (S_ISDIR(st.st_mode) && fr->depth < ls->maxd) {
			int fd = openat(fr->fd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (fd >= 0) {
				int depth = fr->depth + 1; /* fr may move on realloc */
				int e = lst_push(ls, fd, cp, depth);
				cp = NULL;
				if (e == E2BIG) {
					conn_fail(c, E2BIG, "list: too many entries");
					return 0;
				}
			}
		}
		free(cp);
	}
	return 1;
}
