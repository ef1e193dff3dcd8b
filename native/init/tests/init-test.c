/*
 * Unit tests of warren-init's pure parts: the frame field parser, the marker scanner of session
 * output, the passwd and group file parsing, and the pipe writer. Built with ASan and UBSan and
 * run by `make -C native check` (the test runner runs it with the unit tests).
 */
#include "../init.h"

static int failures;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		if (!(cond)) {                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			failures++;                                                   \
		}                                                                     \
	} while (0)

/* A frame body of fields k1 v1 k2 v2 ... (NULL ends), built with the init's own field builder. */
static void build(const char *const *kv)
{
	fb_reset();
	for (; *kv; kv += 2)
		fb_str(kv[0][0], kv[1]);
}

static void test_fields(void)
{
	static const char *const kv[] = {"c", "echo hi", "t", "1500", "c", "last wins", "e", "", NULL};
	build(kv);
	field_t *f;
	size_t n;
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0);
	CHECK(n == 4);
	const field_t *c = fget(f, n, 'c');
	CHECK(c && c->n == 9 && !memcmp(c->v, "last wins", 9));
	unsigned long long v = 0;
	CHECK(fnum(fget(f, n, 't'), 10, 100000, &v) == 0 && v == 1500);
	CHECK(fnum(fget(f, n, 't'), 10, 1000, &v) == -1); /* over max */
	CHECK(fnum(fget(f, n, 'e'), 10, 1000, &v) == -1); /* empty */
	CHECK(fget(f, n, 'z') == NULL);
	free(f);
	/* A length past the end, a header cut short: refused, nothing leaked (ASan). */
	char bad[5] = {'c', 9, 0, 0, 0};
	CHECK(parse_fields(bad, sizeof bad, &f, &n) == -1);
	CHECK(parse_fields(bad, 3, &f, &n) == -1);
	CHECK(parse_fields(bad, 0, &f, &n) == 0 && n == 0);
	free(f);
	/* Octal, and a digit the base has not. */
	field_t m = {'m', "0755", 4};
	CHECK(fnum(&m, 8, 07777, &v) == 0 && v == 0755);
	field_t m8 = {'m', "0789", 4};
	CHECK(fnum(&m8, 8, 07777, &v) == -1);
	/* Paths: made absolute, trailing slashes gone, NUL and empty refused. */
	field_t p1 = {'p', "work//", 6}, p2 = {'p', "/", 1}, p3 = {'p', "a\0b", 3}, p4 = {'p', "", 0};
	char *s = fpath(&p1);
	CHECK(s && !strcmp(s, "/work"));
	free(s);
	s = fpath(&p2);
	CHECK(s && !strcmp(s, "/"));
	free(s);
	CHECK(fpath(&p3) == NULL);
	CHECK(fpath(&p4) == NULL);
	CHECK(!strcmp(pbase("/a/b/c"), "c") && !strcmp(pbase("/"), "/"));
}

/* What a scanner passed on. */
static buf_t got;
static void collect(void *ctx, const char *p, size_t n)
{
	(void)ctx;
	bappend(&got, p, n);
}

/* Feeds `in` in pieces of `step` bytes until a marker: what came before it is passed on whole. */
static size_t feed_steps(scan_t *s, const char *in, size_t step)
{
	size_t n = strlen(in), off = 0;
	while (off < n && !s->marked) {
		size_t take = n - off < step ? n - off : step;
		size_t used = scan_feed(s, in + off, take, collect, NULL);
		off += used;
		if (!s->marked && used < take) /* the scanner takes what it is given unless it marks */
			failures++;
	}
	return off;
}

static void test_scan(void)
{
	const char *pat = "\n__WARREN_END_abc__";
	const char *in = "hello\nworld\n__WARREN_END_abc__ 42\nnext";
	for (size_t step = 1; step <= strlen(in); step++) {
		scan_t s;
		scan_init(&s, pat, 1);
		bfree(&got);
		size_t off = feed_steps(&s, in, step);
		CHECK(s.marked);
		CHECK(!strcmp(s.tail, " 42"));
		/* The marker and its tail are taken, through the newline; "next" is left to feed. */
		CHECK(off == strlen(in) - 4);
		CHECK(bused(&got) == 11 && !memcmp(got.d, "hello\nworld", 11));
	}
	/* A prefix of the marker that turns out not to be one is passed on, late but whole. */
	scan_t s;
	scan_init(&s, pat, 0);
	bfree(&got);
	const char *near = "x\n__WARREN_END_abX then more";
	feed_steps(&s, near, 3);
	CHECK(!s.marked);
	CHECK(bused(&got) <= strlen(near) && !memcmp(got.d, near, bused(&got)));
	scan_feed(&s, "\n__WARREN_END_abc__", 19, collect, NULL);
	CHECK(s.marked);
	CHECK(bused(&got) == strlen(near) && !memcmp(got.d, near, strlen(near)));
	/* Rearmed, it drops what comes before the marker's next copy. */
	scan_rearm(&s);
	bfree(&got);
	scan_feed(&s, "junk\n__WARREN_END_abc__", 23, collect, NULL);
	CHECK(s.marked && bused(&got) == 0);
	/* A tail longer than it keeps is cut, not overrun. */
	scan_init(&s, pat, 1);
	char long_tail[200];
	memset(long_tail, '7', sizeof long_tail);
	scan_feed(&s, pat, strlen(pat), collect, NULL);
	scan_feed(&s, long_tail, sizeof long_tail, collect, NULL);
	CHECK(!s.marked && s.tlen == sizeof s.tail - 1);
	scan_feed(&s, "\n", 1, collect, NULL);
	CHECK(s.marked && strlen(s.tail) == sizeof s.tail - 1);
	bfree(&got);
}

static void test_users(void)
{
	char pw[] = "/tmp/warren-init-test-passwd-XXXXXX", gr[] = "/tmp/warren-init-test-group-XXXXXX";
	int pfd = mkstemp(pw), gfd = mkstemp(gr);
	CHECK(pfd >= 0 && gfd >= 0);
	static const char passwd[] = "# a comment\nroot:x:0:0:root:/root:/bin/bash\nbad:x:abc:0::/x:/bin/sh\nshort:x:5\n"
				     "app:x:1000:1000:App:/home/app:/bin/sh\nnohome:x:1001:1001:::\n";
	static const char group[] = "wheel:x:10:root, app\nstaff:x:50:app\nstaff2:x:50:app\nnope:x:x:app\ncut:x:60\n";
	CHECK(write(pfd, passwd, sizeof passwd - 1) == (ssize_t)(sizeof passwd - 1));
	CHECK(write(gfd, group, sizeof group - 1) == (ssize_t)(sizeof group - 1));
	close(pfd);
	close(gfd);
	struct pwent e;
	CHECK(pw_lookup(pw, "app", 0, &e) == 0 && e.uid == 1000 && e.gid == 1000 && !strcmp(e.home, "/home/app"));
	free(e.name);
	free(e.home);
	CHECK(pw_lookup(pw, NULL, 1001, &e) == 0 && !strcmp(e.name, "nohome") && !strcmp(e.home, "/"));
	free(e.name);
	free(e.home);
	CHECK(pw_lookup(pw, "bad", 0, &e) == -1);   /* a uid that is not a number */
	CHECK(pw_lookup(pw, "short", 0, &e) == -1); /* too few fields */
	CHECK(pw_lookup(pw, "ghost", 0, &e) == -1);
	CHECK(pw_lookup("/nonexistent/passwd", "root", 0, &e) == -1);
	gid_t gs[8];
	size_t n = user_groups(gr, "app", 1000, gs, 8);
	CHECK(n == 3 && gs[0] == 1000 && gs[1] == 10 && gs[2] == 50); /* a gid listed twice counts once */
	CHECK(user_groups(gr, "app", 1000, gs, 2) == 2);
	CHECK(user_groups("/nonexistent/group", "app", 7, gs, 8) == 1 && gs[0] == 7);
	CHECK(all_digits("123") && !all_digits("") && !all_digits("12a"));
	unlink(pw);
	unlink(gr);
}

static void test_pipe_drain(void)
{
	int p[2];
	CHECK(pipe(p) == 0);
	set_nonblock(p[1]);
	buf_t b = {0};
	CHECK(pipe_drain(p[1], &b) == 0); /* nothing to write */
	static char big[1 << 20];
	bappend(&b, big, sizeof big);
	CHECK(pipe_drain(p[1], &b) == 1); /* the pipe is full; the rest waits */
	CHECK(bused(&b) > 0 && bused(&b) < sizeof big);
	signal(SIGPIPE, SIG_IGN);
	close(p[0]);
	CHECK(pipe_drain(p[1], &b) == -1); /* no reader: broken */
	close(p[1]);
	bfree(&b);
}

/* Parses a set-up request built from k1 v1 k2 v2 ... (NULL ends); returns setup_parse's answer. */
static int setup_of(const char *const *kv, struct setup_spec *s, char *err, size_t esz)
{
	build(kv);
	field_t *f;
	size_t n;
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0);
	int e = setup_parse(f, n, s, err, esz);
	free(f);
	return e;
}

static void test_setup(void)
{
	struct setup_spec s;
	char err[600];
	static const char *const full[] = {"r", "nameserver 10.0.0.1\n", "U", "agent", "c", "work//", "p", "/a/b.txt", "m", "600", "B", "hi",
					   "p", "c", "B", "", NULL};
	CHECK(setup_of(full, &s, err, sizeof err) == 0);
	CHECK(s.resolv && s.nresolv == 20 && !memcmp(s.resolv, "nameserver", 10));
	CHECK(s.workdir && !strcmp(s.workdir, "/work"));
	CHECK(s.nfiles == 2);
	CHECK(!strcmp(s.files[0].path, "/a/b.txt") && s.files[0].has_mode && s.files[0].mode == 0600 && s.files[0].n == 2 && !memcmp(s.files[0].data, "hi", 2));
	CHECK(!strcmp(s.files[1].path, "/c") && !s.files[1].has_mode && s.files[1].n == 0); /* an empty file, relative path made absolute */
	setup_free(&s);
	static const char *const none[] = {NULL};
	CHECK(setup_of(none, &s, err, sizeof err) == 0 && !s.resolv && !s.workdir && !s.nfiles);
	setup_free(&s);
	/* Out of order, repeated, unknown or out of bounds: refused, with nothing kept (ASan: no leak). */
	static const char *const bad[][9] = {
		{"B", "x", NULL},                          /* bytes without a path */
		{"p", "/a", NULL},                         /* a path without bytes */
		{"p", "/a", "p", "/b", "B", "x", NULL},    /* two paths for one file */
		{"m", "644", "p", "/a", "B", "x", NULL},   /* a mode before its path */
		{"p", "/a", "m", "9", "B", "x", NULL},     /* not octal */
		{"p", "/a", "m", "17777", "B", "x", NULL}, /* past 07777 */
		{"p", "/a", "m", "1", "m", "2", NULL},     /* two modes */
		{"p", "", "B", "x", NULL},                 /* an empty path */
		{"c", "/w", "c", "/v", NULL},              /* two workdirs */
		{"U", "", NULL},                           /* an empty user */
		{"U", "a", "U", "b", NULL},                /* two users */
		{"r", "x", "r", "y", NULL},                /* two resolv.confs */
		{"p", "/ok", "B", "x", "z", "1", NULL},    /* an unknown field after a good file */
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		CHECK(setup_of(bad[i], &s, err, sizeof err) == EINVAL);
		CHECK(!s.files && !s.workdir && !s.nfiles);
	}
	/* Bounds: a path with a NUL, one past PATH_MAX, a resolv.conf past its limit, too many files. */
	fb_reset();
	fb_add('p', "/a\0b", 4);
	fb_add('B', "", 0);
	field_t *f;
	size_t n;
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0 && setup_parse(f, n, &s, err, sizeof err) == EINVAL);
	free(f);
	static char big[SETUP_MAX_RESOLV + PATH_MAX + 2];
	memset(big, 'a', sizeof big);
	big[0] = '/';
	fb_reset();
	fb_add('p', big, PATH_MAX + 1);
	fb_add('B', "", 0);
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0 && setup_parse(f, n, &s, err, sizeof err) == EINVAL);
	free(f);
	fb_reset();
	fb_add('r', big, SETUP_MAX_RESOLV + 1);
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0 && setup_parse(f, n, &s, err, sizeof err) == EINVAL);
	free(f);
	fb_reset();
	for (int i = 0; i <= SETUP_MAX_FILES; i++) {
		fb_add('p', "/f", 2);
		fb_add('B', "", 0);
	}
	CHECK(parse_fields(fb.d, fb.len, &f, &n) == 0 && setup_parse(f, n, &s, err, sizeof err) == EINVAL);
	CHECK(strstr(err, "more than") != NULL);
	free(f);
}

int main(void)
{
	test_setup();
	test_fields();
	test_pipe_drain();
	test_scan();
	test_users();
	bfree(&fb);
	if (failures) {
		fprintf(stderr, "warren-init unit tests: %d failed\n", failures);
		return 1;
	}
	printf("warren-init unit tests: all passed\n");
	return 0;
}
