/* warren-init: commands on a pseudo-terminal (an exec with `P`): its start, its size. */
#include "init.h"

/* "COLS ROWS", each 1..10000. Returns 0 or EINVAL. */
int pty_parse_size(const char *p, size_t n, unsigned short *cols, unsigned short *rows)
{
	char s[32];
	if (n == 0 || n >= sizeof s)
		return EINVAL;
	memcpy(s, p, n);
	s[n] = 0;
	unsigned c, r;
	char tail;
	if (sscanf(s, "%u %u%c", &c, &r, &tail) != 2 || c < 1 || r < 1 || c > 10000 || r > 10000)
		return EINVAL;
	*cols = (unsigned short)c;
	*rows = (unsigned short)r;
	return 0;
}

int pty_resize(int master, unsigned short cols, unsigned short rows)
{
	struct winsize ws = { .ws_row = rows, .ws_col = cols };
	return ioctl(master, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

/* The sandbox's own devpts instance (mounted with newinstance): its ptmx, else /dev/ptmx. */
static int open_master(void)
{
	int m = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		m = open("/dev/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
	return m;
}

/*
 * Starts `sa` in a new session whose controlling terminal is a new pseudo-terminal of the
 * size in `sa`: its stdin, stdout and stderr are the terminal, so the line discipline echoes,
 * edits lines and turns ^C into SIGINT for the foreground group, as at a console.
 * fds: [0] the master for input (a duplicate), [1] the master for output, [2] -1, [3] the
 * error pipe. Returns pid or -errno.
 */
pid_t spawn_pty(struct spawn_args *sa, int fds[4])
{
	int master = -1, in = -1, slave = -1, pep[2] = {-1, -1};
	int err = 0;
	char name[64];
	if ((master = open_master()) < 0 || (in = fcntl(master, F_DUPFD_CLOEXEC, 0)) < 0) {
		err = errno;
		goto fail;
	}
	int unlock = 0;
	if (ioctl(master, TIOCSPTLCK, &unlock) < 0 || ptsname_r(master, name, sizeof name) != 0 ||
	    (slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0 || pipe2(pep, O_CLOEXEC) < 0) {
		err = errno ? errno : EIO;
		goto fail;
	}
	if ((err = -pty_resize(master, sa->cols, sa->rows)))
		goto fail;
	pid_t pid = fork_child(sa, slave, slave, slave, pep, 1);
	if (pid < 0) {
		err = -pid;
		goto fail;
	}
	close(slave);
	close(pep[1]);
	set_nonblock(master);
	set_nonblock(in);
	set_nonblock(pep[0]);
	fds[0] = in;
	fds[1] = master;
	fds[2] = -1;
	fds[3] = pep[0];
	return pid;
fail:
	if (master >= 0)
		close(master);
	if (in >= 0)
		close(in);
	if (slave >= 0)
		close(slave);
	for (int i = 0; i < 2; i++)
		if (pep[i] >= 0)
			close(pep[i]);
	return -(err ? err : EIO);
}
