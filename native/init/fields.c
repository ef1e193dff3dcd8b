/* warren-init: frames' fields, built (the one reused field builder) and parsed (pure; unit-tested and fuzzed). */
#include "init.h"

/* Field builder (single, global, reused). */
buf_t fb;

void fb_reset(void) { fb.off = fb.len = 0; }

void fb_add(char k, const void *v, size_t n)
{
	char h[5];
	h[0] = k;
	put32(h + 1, (uint32_t)n);
	bappend(&fb, h, 5);
	bappend(&fb, v, n);
}

void fb_str(char k, const char *s) { fb_add(k, s, strlen(s)); }

void fb_num(char k, long long v)
{
	char t[32];
	snprintf(t, sizeof t, "%lld", v);
	fb_str(k, t);
}

int parse_fields(const char *p, size_t n, field_t **out, size_t *cnt)
{
	size_t cap = 0, c = 0, i = 0;
	field_t *f = NULL;
	while (i < n) {
		if (n - i < 5)
			goto bad;
		uint32_t l = get32(p + i + 1);
		if (l > n - i - 5)
			goto bad;
		if (c == cap) {
			cap = cap ? cap * 2 : 16;
			f = xrealloc(f, cap * sizeof *f);
		}
		f[c].k = (unsigned char)p[i];
		f[c].v = p + i + 5;
		f[c].n = l;
		c++;
		i += 5 + (size_t)l;
	}
	*out = f;
	*cnt = c;
	return 0;
bad:
	free(f);
	return -1;
}

const field_t *fget(const field_t *f, size_t n, char k)
{
	const field_t *r = NULL;
	for (size_t i = 0; i < n; i++)
		if (f[i].k == (unsigned char)k)
			r = &f[i];
	return r;
}

int fhasnul(const field_t *f) { return memchr(f->v, 0, f->n) != NULL; }

/* Parse a decimal (base 10) or octal (base 8) unsigned number field. */
int fnum(const field_t *f, int base, unsigned long long max, unsigned long long *out)
{
	if (!f->n || f->n > 24)
		return -1;
	unsigned long long v = 0;
	for (uint32_t i = 0; i < f->n; i++) {
		int d = (unsigned char)f->v[i] - '0';
		if (d < 0 || d >= base)
			return -1;
		v = v * (unsigned)base + (unsigned)d;
		if (v > max)
			return -1;
	}
	*out = v;
	return 0;
}

/* "1" flag */
int fflag(const field_t *f, size_t n, char k)
{
	const field_t *x = fget(f, n, k);
	return x && x->n == 1 && x->v[0] == '1';
}

/* Absolute, NUL-free path from a field; trailing slashes removed. NULL on error. */
char *fpath(const field_t *f)
{
	if (!f || !f->n || fhasnul(f) || f->n > 65536)
		return NULL;
	char *p = xrealloc(NULL, (size_t)f->n + 2);
	size_t o = 0;
	if (f->v[0] != '/')
		p[o++] = '/';
	memcpy(p + o, f->v, f->n);
	o += f->n;
	while (o > 1 && p[o - 1] == '/')
		o--;
	p[o] = 0;
	return p;
}

const char *pbase(const char *p)
{
	if (!strcmp(p, "/"))
		return "/";
	const char *s = strrchr(p, '/');
	return s ? s + 1 : p;
}
