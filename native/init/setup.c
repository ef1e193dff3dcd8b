/*
 * warren-init: a sandbox's set-up in one request (`C`): its resolv.conf, its user checked, its
 * workdir and its files, applied in that order with the pieces the file operations use (fpath,
 * owner_get, mkdir_p, file_create), so a path resolves and an owner applies exactly as with W and M.
 */
#include "init.h"

/* Ends the request with `f`: errno, message, and what failed (`w`: user, workdir, file) and its path. */
static void setup_fail(struct conn *c, int err, const char *what, const char *path, const char *msg)
{
	fb_reset();
	fb_num('n', err);
	fb_str('m', msg);
	fb_str('w', what);
	if (path)
		fb_str('p', path);
	conn_final(c, REPLY_FAILED, fb.d, fb.len);
}

/* Writes a whole file: created (parents too) or truncated, owned by *o, bytes, closed. */
static int put_file(const struct setup_file *sf, const struct owner *o, char *err, size_t esz)
{
	int fd, e = file_create(sf->path, sf->has_mode, sf->mode, o, 1, &fd, err, esz);
	if (e)
		return e;
	const char *d = sf->data;
	size_t n = sf->n;
	while (n) {
		ssize_t w = write(fd, d, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			e = w < 0 ? errno : EIO;
			break;
		}
		d += w;
		n -= (size_t)w;
	}
	if (close(fd) < 0 && !e)
		e = errno;
	if (e)
		snprintf(err, esz, "write %s: %s", sf->path, strerror(e));
	return e;
}

void op_setup(struct conn *c, const field_t *f, size_t nf)
{
	struct setup_spec s;
	char err[600];
	int e = setup_parse(f, nf, &s, err, sizeof err);
	if (e) {
		conn_fail(c, e, "%s", err);
		return;
	}
	/* The node's resolver, as the edge wrote it with W before: an image whose resolv.conf cannot be
	 * written (a directory, a read-only mount) keeps its own, so a failure here is not one. */
	if (s.resolv) {
		struct owner root = {0};
		struct setup_file rc = {.path = "/etc/resolv.conf", .data = s.resolv, .n = s.nresolv, .has_mode = 1, .mode = 0644};
		put_file(&rc, &root, err, sizeof err);
	}
	struct owner o;
	e = owner_get(f, nf, &o, err, sizeof err);
	if (e) {
		setup_fail(c, e, "user", NULL, err);
		goto out;
	}
	if (s.workdir) {
		const char *what;
		e = mkdir_p(s.workdir, 0755, &o, &what);
		/* The user works there: theirs even when it was there before (mkdir_p chowns only what it makes). */
		if (!e && o.set && chown(s.workdir, o.uid, o.gid) < 0) {
			e = errno;
			what = "chown";
		}
		if (e) {
			snprintf(err, sizeof err, "%s %s: %s", what, s.workdir, strerror(e));
			setup_fail(c, e, "workdir", s.workdir, err);
			goto out;
		}
	}
	for (size_t i = 0; i < s.nfiles; i++) {
		e = put_file(&s.files[i], &o, err, sizeof err);
		if (e) {
			setup_fail(c, e, "file", s.files[i].path, err);
			goto out;
		}
	}
	conn_done(c);
out:
	setup_free(&s);
}
