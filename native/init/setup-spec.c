/* warren-init: the fields of a set-up request (`C`) checked and gathered (pure; unit-tested and fuzzed). */
#include "init.h"

void setup_free(struct setup_spec *s)
{
	for (size_t i = 0; i < s->nfiles; i++)
		free(s->files[i].path);
	free(s->files);
	free(s->workdir);
	memset(s, 0, sizeof *s);
}

/*
 * Fields: `r` resolv.conf bytes, `U` user, `c` workdir (each at most once), then per file `p`
 * path, an optional `m` octal mode and `B` its bytes (the `B` ends the file). Anything else, a
 * field out of that order, a length past its bound or more than SETUP_MAX_FILES files: EINVAL,
 * with what was wrong in err. Paths come out of fpath as every file operation's do.
 */
int setup_parse(const field_t *f, size_t nf, struct setup_spec *s, char *err, size_t esz)
{
	memset(s, 0, sizeof *s);
	struct setup_file cur = {0};
	int seen_r = 0, seen_u = 0, seen_c = 0;
	size_t cap = 0;
	for (size_t i = 0; i < nf; i++) {
		const field_t *x = &f[i];
		switch (x->k) {
		case 'r':
			if (seen_r++ || x->n > SETUP_MAX_RESOLV) {
				snprintf(err, esz, "setup: invalid resolv.conf");
				goto bad;
			}
			s->resolv = x->v;
			s->nresolv = x->n;
			break;
		case 'U':
			/* The user itself is resolved later, by owner_get, as W and M do. */
			if (seen_u++ || !x->n || x->n > SETUP_MAX_USER || fhasnul(x)) {
				snprintf(err, esz, "setup: invalid user");
				goto bad;
			}
			break;
		case 'c':
			if (seen_c++ || x->n > PATH_MAX || !(s->workdir = fpath(x))) {
				snprintf(err, esz, "setup: invalid workdir");
				goto bad;
			}
			break;
		case 'p':
			if (cur.path || x->n > PATH_MAX || !(cur.path = fpath(x))) {
				snprintf(err, esz, "setup: file %zu: invalid path", s->nfiles);
				goto bad;
			}
			break;
		case 'm': {
			unsigned long long mode;
			if (!cur.path || cur.has_mode || fnum(x, 8, 07777, &mode) < 0) {
				snprintf(err, esz, "setup: file %zu: invalid mode", s->nfiles);
				goto bad;
			}
			cur.has_mode = 1;
			cur.mode = (mode_t)mode;
			break;
		}
		case 'B':
			if (!cur.path) {
				snprintf(err, esz, "setup: file %zu: bytes without a path", s->nfiles);
				goto bad;
			}
			if (s->nfiles >= SETUP_MAX_FILES) {
				snprintf(err, esz, "setup: more than %d files", SETUP_MAX_FILES);
				goto bad;
			}
			if (s->nfiles == cap) {
				cap = cap ? cap * 2 : 8;
				s->files = xrealloc(s->files, cap * sizeof *s->files);
			}
			cur.data = x->v;
			cur.n = x->n;
			s->files[s->nfiles++] = cur;
			memset(&cur, 0, sizeof cur);
			break;
		default:
			snprintf(err, esz, "setup: unknown field");
			goto bad;
		}
	}
	if (cur.path) {
		snprintf(err, esz, "setup: file %zu: no bytes", s->nfiles);
		goto bad;
	}
	return 0;
bad:
	free(cur.path);
	setup_free(s);
	return EINVAL;
}
