/* warren-init: file operations (`R`, `W`, `S`, `M`, `V`; `C` uses the same pieces): paths resolved inside the sandbox, owners, writes in place; an entry with its owner and user attributes. */
#include "init.h"

/* Parse and resolve the optional `U` field (W, M, C). Returns 0 or errno (message in err). */
int owner_get(const field_t *f, size_t nf, struct owner *o, char *err, size_t esz)
{
	memset(o, 0, sizeof *o);
	const field_t *u = fget(f, nf, 'U');
	if (!u || !u->n)
		return 0;
	if (fhasnul(u) || memchr(u->v, ':', u->n) || memchr(u->v, '\n', u->n)) {
		snprintf(err, esz, "user: invalid user");
		return EINVAL;
	}
	char *name = xstrndup(u->v, u->n);
	struct pwent pw = {0};
	int found, e = user_resolve(name, &pw, &found);
	if (e)
		snprintf(err, esz, e == EINVAL ? "user: %s: invalid uid" : "user: %s: no such user", name);
	else {
		o->set = 1;
		o->uid = pw.uid;
		o->gid = pw.gid;
	}
	if (found) {
		free(pw.name);
		free(pw.home);
	}
	free(name);
	return e;
}

/* mkdir -p; each directory it creates is lchown'd to *o when o->set. Returns 0 or errno;
 * *what names the failing step ("mkdir" or "chown"). */
int mkdir_p(const char *path, mode_t mode, const struct owner *o, const char **what)
{
	*what = "mkdir";
	char *p = strdup(path);
	if (!p)
		return ENOMEM;
	size_t l = strlen(p);
	while (l > 1 && p[l - 1] == '/')
		p[--l] = 0;
	int err = 0;
	for (size_t i = 1; i <= l; i++) {
		if (p[i] != '/' && p[i] != 0)
			continue;
		char save = p[i];
		p[i] = 0;
		if (mkdir(p, mode) < 0) {
			int e = errno;
			struct stat st;
			if (save == 0) {
				if (e == EEXIST) {
					if (stat(p, &st) < 0 || !S_ISDIR(st.st_mode))
						err = EEXIST;
				} else {
					err = e;
				}
			} else if (e != EEXIST && !(stat(p, &st) == 0 && S_ISDIR(st.st_mode))) {
				err = e;
			}
		} else if (o && o->set && lchown(p, o->uid, o->gid) < 0) {
			err = errno;
			*what = "chown";
		}
		p[i] = save;
		if (err)
			break;
	}
	free(p);
	return err;
}

void fb_entry(const char *path, const char *name, const struct stat *st, int dirfd, const char *rel)
{
	fb_reset();
	fb_str('p', path);
	fb_str('n', name);
	char t = S_ISREG(st->st_mode) ? 'f' : S_ISDIR(st->st_mode) ? 'd' : S_ISLNK(st->st_mode) ? 'l' : 'o';
	fb_add('t', &t, 1);
	fb_num('z', (long long)st->st_size);
	fb_num('m', (long long)(st->st_mode & 07777));
	fb_num('T', (long long)st->st_mtim.tv_sec * 1000 + st->st_mtim.tv_nsec / 1000000);
	fb_num('u', (long long)st->st_uid);
	fb_num('g', (long long)st->st_gid);
	if (S_ISLNK(st->st_mode)) {
		char tgt[PATH_MAX];
		ssize_t k = readlinkat(dirfd, rel, tgt, sizeof tgt);
		if (k >= 0)
			fb_add('k', tgt, (size_t)k);
	}
	fb_xattrs(path);
}

void op_stat(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	struct stat st;
	if (!p) {
		conn_fail(c, EINVAL, "stat: invalid path");
		return;
	}
	if (lstat(p, &st) < 0) {
		int e = errno;
		conn_fail(c, e, "stat %s: %s", p, strerror(e));
	} else {
		fb_entry(p, pbase(p), &st, AT_FDCWD, p);
		conn_final(c, REPLY_DONE, fb.d, fb.len);
	}
	free(p);
}

void op_mkdir(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	if (!p) {
		conn_fail(c, EINVAL, "mkdir: invalid path");
		return;
	}
	struct owner o;
	char oerr[400];
	const char *what;
	int e = owner_get(f, nf, &o, oerr, sizeof oerr);
	if (e) {
		conn_fail(c, e, "mkdir: %s", oerr);
		free(p);
		return;
	}
	e = mkdir_p(p, 0755, &o, &what);
	if (e)
		conn_fail(c, e, "%s %s: %s", what, p, strerror(e));
	else
		conn_done(c);
	free(p);
}

void op_rename(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p')), *q = fpath(fget(f, nf, 'q'));
	if (!p || !q) {
		conn_fail(c, EINVAL, "rename: invalid path");
	} else if (rename(p, q) < 0) {
		int e = errno;
		conn_fail(c, e, "rename %s: %s", p, strerror(e));
	} else {
		conn_done(c);
	}
	free(p);
	free(q);
}

void op_read(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	if (!p) {
		conn_fail(c, EINVAL, "read: invalid path");
		return;
	}
	int fd = open(p, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0) {
		int e = errno;
		conn_fail(c, e, "open %s: %s", p, strerror(e));
	} else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		conn_fail(c, EINVAL, "read %s: not a regular file", p);
	} else {
		c->ffd = fd;
	}
	free(p);
}

/* Returns 1 if more can be done right now. */
int read_pump(struct conn *c)
{
	for (int i = 0; i < 16; i++) {
		if (!clive(c) || c->ffd < 0 || bused(&c->out) >= HIGH_WATER)
			return 0;
		size_t room = chunk_room(c);
		breserve(&c->out, room + 5);
		ssize_t n = read(c->ffd, c->out.d + c->out.len + 5, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;
			conn_fail(c, e, "read: %s", strerror(e));
			return 0;
		}
		if (n == 0) {
			conn_done(c);
			return 0;
		}
		put32(c->out.d + c->out.len, (uint32_t)n + 1);
		c->out.d[c->out.len + 4] = REPLY_STDOUT;
		c->out.len += (size_t)n + 5;
		conn_flush(c);
	}
	return 1;
}

/*
 * Opens a regular file for writing, created or truncated, as W and C do: its parents made first
 * when `parents` (each new one owned by *o), then chowned to *o and given `mode` (when has_mode).
 * Non-blocking open, so a FIFO never holds the init; the descriptor returned blocks. Returns 0
 * (*fdp set) or errno, with err saying which step failed on which path.
 */
int file_create(const char *p, int has_mode, mode_t mode, const struct owner *o, int parents, int *fdp, char *err, size_t esz)
{
	if (parents) {
		char *dir = strdup(p);
		char *sl = dir ? strrchr(dir, '/') : NULL;
		const char *what = "mkdir";
		int e = dir ? 0 : ENOMEM;
		if (sl && sl != dir) {
			*sl = 0;
			e = mkdir_p(dir, 0755, o, &what);
		}
		free(dir);
		if (e) {
			snprintf(err, esz, "%s %s: %s", what, p, strerror(e));
			return e;
		}
	}
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, has_mode ? mode & 0777 : 0644);
	struct stat st;
	int e = 0;
	if (fd < 0) {
		e = errno;
		snprintf(err, esz, "open %s: %s", p, strerror(e));
		return e;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		e = EINVAL;
		snprintf(err, esz, "write %s: not a regular file", p);
	} else if (o->set && fchown(fd, o->uid, o->gid) < 0) {
		/* before fchmod: chown clears setuid/setgid bits */
		e = errno;
		snprintf(err, esz, "chown %s: %s", p, strerror(e));
	} else if (has_mode && fchmod(fd, mode) < 0) {
		e = errno;
		snprintf(err, esz, "chmod %s: %s", p, strerror(e));
	}
	if (e) {
		close(fd);
		return e;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	*fdp = fd;
	return 0;
}

void op_write(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	const field_t *mf = fget(f, nf, 'm');
	unsigned long long mode = 0644;
	if (!p || (mf && fnum(mf, 8, 07777, &mode) < 0)) {
		free(p);
		conn_fail(c, EINVAL, "write: invalid request");
		return;
	}
	struct owner o;
	char err[600];
	int e = owner_get(f, nf, &o, err, sizeof err);
	if (e) {
		free(p);
		conn_fail(c, e, "write: %s", err);
		return;
	}
	int fd;
	e = file_create(p, mf != NULL, (mode_t)mode, &o, fflag(f, nf, 'P'), &fd, err, sizeof err);
	if (e)
		conn_fail(c, e, "%s", err);
	else
		c->ffd = fd;
	free(p);
}

void write_chunk(struct conn *c, const char *d, size_t n)
{
	while (n && c->ffd >= 0) {
		ssize_t w = write(c->ffd, d, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = w < 0 ? errno : EIO;
			conn_fail(c, e, "write: %s", strerror(e));
			return;
		}
		d += w;
		n -= (size_t)w;
	}
}

void write_end(struct conn *c)
{
	int fd = c->ffd;
	c->ffd = -1;
	if (close(fd) < 0) {
		int e = errno;
		conn_fail(c, e, "write: %s", strerror(e));
	} else {
		conn_done(c);
	}
}
