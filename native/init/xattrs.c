/* warren-init: a path's extended attributes in the user namespace: listed with its entry (`x`
 * fields of S and L), and set under a prefix (`A`). */
#include "init.h"
#include <sys/xattr.h>

/* Names of a path's attributes (the kernel's most, XATTR_LIST_MAX). */
static char xnames[65536];
/* One `x` field: name, NUL, value. */
static char xentry[XATTR_NAME_MAX + 1 + XATTR_VALUE_MAX];

void fb_xattrs(const char *path)
{
	ssize_t n = llistxattr(path, xnames, sizeof xnames);
	int kept = 0;
	for (ssize_t i = 0; i < n && kept < XATTR_COUNT_MAX; i += (ssize_t)strlen(xnames + i) + 1) {
		const char *nm = xnames + i;
		size_t ln = strlen(nm);
		if (strncmp(nm, "user.", 5) || ln > XATTR_NAME_MAX)
			continue;
		memcpy(xentry, nm, ln + 1);
		/* A value past XATTR_VALUE_MAX is left out (ERANGE), as is one gone since the list. */
		ssize_t k = lgetxattr(path, nm, xentry + ln + 1, XATTR_VALUE_MAX);
		if (k < 0)
			continue;
		fb_add('x', xentry, ln + 1 + (size_t)k);
		kept++;
	}
}

/* Whether `name` is among the request's `x` fields. */
static int wanted(const field_t *f, size_t nf, const char *name)
{
	size_t ln = strlen(name);
	for (size_t i = 0; i < nf; i++)
		if (f[i].k == 'x' && f[i].n > ln && !memcmp(f[i].v, name, ln + 1))
			return 1;
	return 0;
}

void op_attrs(struct conn *c, const field_t *f, size_t nf)
{
	char *p = fpath(fget(f, nf, 'p'));
	const field_t *qf = fget(f, nf, 'q');
	char prefix[64];
	if (!p || !qf || qf->n < 6 || qf->n >= sizeof prefix || memcmp(qf->v, "user.", 5) || fhasnul(qf)) {
		free(p);
		conn_fail(c, EINVAL, "attrs: invalid request");
		return;
	}
	memcpy(prefix, qf->v, qf->n);
	prefix[qf->n] = 0;
	/* Every attribute is checked before any is changed. */
	int count = 0;
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k != 'x')
			continue;
		const char *nul = memchr(f[i].v, 0, f[i].n);
		size_t ln = nul ? (size_t)(nul - f[i].v) : 0;
		if (!nul || ln <= qf->n || ln > XATTR_NAME_MAX || memcmp(f[i].v, prefix, qf->n) || f[i].n - ln - 1 > XATTR_VALUE_MAX || ++count > XATTR_COUNT_MAX) {
			free(p);
			conn_fail(c, EINVAL, "attrs: an attribute that is not name NUL value under %s, or too many", prefix);
			return;
		}
	}
	ssize_t n = llistxattr(p, xnames, sizeof xnames);
	if (n < 0 && errno != ENOTSUP) {
		int e = errno;
		conn_fail(c, e, "attrs %s: %s", p, strerror(e));
		free(p);
		return;
	}
	for (ssize_t i = 0; i < n; i += (ssize_t)strlen(xnames + i) + 1) {
		const char *nm = xnames + i;
		if (!strncmp(nm, prefix, qf->n) && !wanted(f, nf, nm) && lremovexattr(p, nm) < 0 && errno != ENODATA) {
			int e = errno;
			conn_fail(c, e, "attrs %s: remove %s: %s", p, nm, strerror(e));
			free(p);
			return;
		}
	}
	for (size_t i = 0; i < nf; i++) {
		if (f[i].k != 'x')
			continue;
		size_t ln = strlen(f[i].v);
		if (lsetxattr(p, f[i].v, f[i].v + ln + 1, f[i].n - ln - 1, 0) < 0) {
			int e = errno;
			conn_fail(c, e, "attrs %s: set %s: %s", p, f[i].v, strerror(e));
			free(p);
			return;
		}
	}
	free(p);
	conn_done(c);
}
