/* warren-init: removal (`D` of a path), done in a forked child so a deep tree cannot stall the loop. */
#include "init.h"

static int rm_contents(int dfd, dev_t dev)
{
	char *b = malloc(8192);
	if (!b)
		return ENOMEM;
	int err = 0;
	for (int pass = 0; pass < 2 && !err; pass++) {
		int removed = 0;
		lseek(dfd, 0, SEEK_SET);
		for (;;) {
			long n = syscall(SYS_getdents64, dfd, b, 8192);
			if (n < 0) {
				err = errno;
				break;
			}
			if (n == 0)
				break;
			for (long o = 0; o < n && !err;) {
				struct linux_dirent64 *de = (struct linux_dirent64 *)(b + o);
				o += de->d_reclen;
				const char *nm = de->d_name;
				if (!strcmp(nm, ".") || !strcmp(nm, ".."))
					continue;
				struct stat st;
				if (fstatat(dfd, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
					if (errno != ENOENT)
						err = errno;
					continue;
				}
				if (S_ISDIR(st.st_mode)) {
					if (st.st_dev == dev) {
						int fd = openat(dfd, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
						if (fd < 0) {
							err = errno;
							break;
						}
						err = rm_contents(fd, dev);
						close(fd);
						if (err)
							break;
					}
					if (unlinkat(dfd, nm, AT_REMOVEDIR) < 0 && errno != ENOENT)
						err = errno;
				} else if (unlinkat(dfd, nm, 0) < 0 && errno != ENOENT) {
					err = errno;
				}
				removed++;
			}
			if (err)
				break;
		}
		if (!removed)
			break;
	}
	free(b);
	return err;
}

static int do_delete(const char *path, int rec)
{
	struct stat st, rst;
	if (lstat(path, &st) < 0)
		return errno;
	if (lstat("/", &rst) == 0 && st.st_dev == rst.st_dev && st.st_ino == rst.st_ino)
		return EINVAL;
	if (!S_ISDIR(st.st_mode))
		return unlink(path) < 0 ? errno : 0;
	if (rec) {
		int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return errno;
		int e = rm_contents(fd, st.st_dev);
		close(fd);
		if (e)
			return e;
	}
	return rmdir(path) < 0 ? errno : 0;
}

void op_delete(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	if (!p) {
		conn_fail(c, EINVAL, "delete: invalid path");
		return;
	}
	int rec = fflag(f, nf, 'r');
	if (!strcmp(p, "/")) {
		free(p);
		conn_fail(c, EINVAL, "delete: refusing to delete /");
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		free(p);
		conn_fail(c, e, "delete: %s", strerror(e));
		return;
	}
	if (pid == 0) {
		if (syscall(SYS_close_range, 3u, ~0u, 0u) < 0)
			for (int fd = 3; fd < 65536; fd++)
				close(fd);
		int e = do_delete(p, rec);
		_exit(e > 255 ? EIO : e);
	}
	free(p);
	struct xop *x = xrealloc(NULL, sizeof *x);
	memset(x, 0, sizeof *x);
	x->pid = pid;
	x->conn = c;
	x->next = xops;
	xops = x;
	c->xop = x;
}

void xop_exited(struct xop *x, int status)
{
	x->done = 1;
	struct conn *c = x->conn;
	x->conn = NULL;
	if (!c)
		return;
	c->xop = NULL;
	int e = WIFEXITED(status) ? WEXITSTATUS(status) : EIO;
	if (e == EINVAL)
		conn_fail(c, e, "delete: refusing to delete /");
	else if (e)
		conn_fail(c, e, "delete: %s", strerror(e));
	else
		conn_done(c);
}
