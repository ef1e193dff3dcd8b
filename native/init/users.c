/* warren-init: users and groups from the image's passwd and group files (parsing unit-tested and fuzzed). */
#include "init.h"

int all_digits(const char *s)
{
	if (!*s)
		return 0;
	for (; *s; s++)
		if (!isdigit((unsigned char)*s))
			return 0;
	return 1;
}

/* Split a colon line into at most max fields, in place. */
static int split_colon(char *line, char **fl, int max)
{
	int n = 0;
	char *p = line;
	size_t l = strlen(p);
	while (l && (p[l - 1] == '\n' || p[l - 1] == '\r'))
		p[--l] = 0;
	while (n < max) {
		fl[n++] = p;
		char *c = strchr(p, ':');
		if (!c)
			break;
		*c = 0;
		p = c + 1;
	}
	return n;
}

/* Look up by name (name != NULL) or by uid in a passwd file. 0 found, -1 not found. */
int pw_lookup(const char *passwd, const char *name, uid_t uid, struct pwent *out)
{
	FILE *f = fopen(passwd, "re");
	if (!f)
		return -1;
	char *line = NULL;
	size_t cap = 0;
	int rc = -1;
	while (getline(&line, &cap, f) > 0) {
		char *fl[7];
		if (line[0] == '#' || split_colon(line, fl, 7) < 6)
			continue;
		if (!all_digits(fl[2]) || !all_digits(fl[3]))
			continue;
		uid_t u = (uid_t)strtoul(fl[2], NULL, 10);
		if (name ? strcmp(fl[0], name) != 0 : u != uid)
			continue;
		out->name = strdup(fl[0]);
		out->home = strdup(fl[5][0] ? fl[5] : "/");
		out->uid = u;
		out->gid = (gid_t)strtoul(fl[3], NULL, 10);
		rc = 0;
		break;
	}
	free(line);
	fclose(f);
	return rc;
}

/* Resolve a user (name or numeric uid) the way exec does: a name must be in /etc/passwd; a
 * uid missing there stands for itself with gid = uid. Returns 0, EINVAL (bad uid) or ENOENT.
 * *found: pw->name/home were allocated from /etc/passwd (else name is user, home "/"). */
int user_resolve(char *user, struct pwent *pw, int *found)
{
	*found = 0;
	if (all_digits(user)) {
		unsigned long u = strtoul(user, NULL, 10);
		if (u > 0xfffffffeUL)
			return EINVAL;
		*found = pw_lookup(PASSWD_FILE, NULL, (uid_t)u, pw) == 0;
		if (!*found) {
			pw->name = user;
			pw->home = "/";
			pw->uid = (uid_t)u;
			pw->gid = (gid_t)u;
		}
		return 0;
	}
	*found = pw_lookup(PASSWD_FILE, user, 0, pw) == 0;
	return *found ? 0 : ENOENT;
}

/* The groups of a user in a group file, its primary one first, at most max. */
size_t user_groups(const char *group, const char *name, gid_t primary, gid_t *gs, size_t max)
{
	size_t n = 0;
	gs[n++] = primary;
	FILE *f = fopen(group, "re");
	if (!f)
		return n;
	char *line = NULL;
	size_t cap = 0;
	while (getline(&line, &cap, f) > 0 && n < max) {
		char *fl[4];
		if (line[0] == '#' || split_colon(line, fl, 4) < 4 || !all_digits(fl[2]))
			continue;
		gid_t g = (gid_t)strtoul(fl[2], NULL, 10);
		char *save = NULL;
		for (char *m = strtok_r(fl[3], ",", &save); m; m = strtok_r(NULL, ",", &save)) {
			while (*m == ' ')
				m++;
			if (strcmp(m, name) != 0)
				continue;
			int dup = 0;
			for (size_t i = 0; i < n; i++)
				if (gs[i] == g)
					dup = 1;
			if (!dup)
				gs[n++] = g;
			break;
		}
	}
	free(line);
	fclose(f);
	return n;
}
