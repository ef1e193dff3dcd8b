/*
 * warren-mountd: host-side mount helper, a long-running child of the edge.
 *
 * Reads one command per line on stdin (fields separated by TAB) and answers
 * one line per command on stdout, in order:
 *   overlay LOWER UPPER WORK TARGET   -> overlay mount (LOWER may be colon-joined)
 *   erofs   FILE TARGET               -> read-only file-backed EROFS mount
 *   umount  TARGET                    -> lazy unmount; "not mounted" is ok
 *   ping                              -> ok
 * Replies: "ok" or "err<TAB>ERRNO<TAB>MESSAGE". Exits 0 on EOF.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#define MAX_LINE (64 * 1024)
#define MAX_FIELDS 8

static void reply_ok(void)
{
	fputs("ok\n", stdout);
}

static void reply_err(int e, const char *what)
{
	printf("err\t%d\t%s: %s\n", e, what, strerror(e));
}

static int has_bad(const char *s, const char *bad)
{
	return strpbrk(s, bad) != NULL;
}

static void do_overlay(char **f)
{
	const char *lower = f[1], *upper = f[2], *work = f[3], *target = f[4];
	/* ',' separates mount options; reject rather than mis-parse. */
	if (!*lower || !*upper || !*work || !*target || has_bad(lower, ",") || has_bad(upper, ",:") ||
	    has_bad(work, ",:")) {
		reply_err(EINVAL, "overlay");
		return;
	}
	long page = sysconf(_SC_PAGESIZE);
	if (page <= 0)
		page = 4096;
	size_t need = strlen(lower) + strlen(upper) + strlen(work) + 64;
	char *opts = malloc(need);
	if (!opts) {
		reply_err(ENOMEM, "overlay");
		return;
	}
	int n = snprintf(opts, need, "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
	if (n < 0 || (long)n >= page) {
		free(opts);
		reply_err(E2BIG, "overlay");
		return;
	}
	if (mount("overlay", target, "overlay", 0, opts) < 0)
		reply_err(errno, "overlay");
	else
		reply_ok();
	free(opts);
}

static void do_erofs(char **f)
{
	if (!*f[1] || !*f[2]) {
		reply_err(EINVAL, "erofs");
		return;
	}
	if (mount(f[1], f[2], "erofs", MS_RDONLY | MS_NODEV | MS_NOSUID, NULL) < 0)
		reply_err(errno, "erofs");
	else
		reply_ok();
}

static void do_umount(char **f)
{
	if (!*f[1]) {
		reply_err(EINVAL, "umount");
		return;
	}
	if (umount2(f[1], MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		reply_err(errno, "umount");
	else
		reply_ok();
}

static void handle(char *line)
{
	char *f[MAX_FIELDS + 1] = {0};
	int n = 0;
	char *p = line;
	for (;;) {
		if (n == MAX_FIELDS) {
			reply_err(EINVAL, "too many fields");
			return;
		}
		f[n++] = p;
		char *t = strchr(p, '\t');
		if (!t)
			break;
		*t = 0;
		p = t + 1;
	}
	const char *cmd = f[0];
	if (!strcmp(cmd, "ping") && n == 1)
		reply_ok();
	else if (!strcmp(cmd, "overlay") && n == 5)
		do_overlay(f);
	else if (!strcmp(cmd, "erofs") && n == 3)
		do_erofs(f);
	else if (!strcmp(cmd, "umount") && n == 2)
		do_umount(f);
	else
		reply_err(EINVAL, "unknown command");
}

int main(void)
{
	signal(SIGPIPE, SIG_IGN);
	static char line[MAX_LINE + 2];
	for (;;) {
		if (!fgets(line, sizeof line, stdin))
			break;
		size_t l = strlen(line);
		if (l && line[l - 1] == '\n') {
			line[--l] = 0;
		} else if (l > MAX_LINE) {
			/* over-long line: swallow the rest of it */
			int c;
			while ((c = getchar()) != EOF && c != '\n') {
			}
			reply_err(E2BIG, "line too long");
			if (fflush(stdout) != 0)
				return 1;
			continue;
		}
		if (l && line[l - 1] == '\r')
			line[--l] = 0;
		if (memchr(line, 0, l)) {
			reply_err(EINVAL, "invalid line");
		} else {
			handle(line);
		}
		if (fflush(stdout) != 0)
			return 1;
	}
	return 0;
}
