/*
 * A hostile guest's probe of the init's socket (tests only: test/src/microvm.test.ts copies it
 * into a microVM). As any user it connects to the abstract socket VM_AGENT_NAME and asks the init,
 * as the edge would, to run argv as root (an `E` frame with `U` root: docs/init-protocol.md), and
 * writes the command's stdout. Exits 2 when the socket cannot be reached (the secure answer for
 * a sandbox's process), 0 when the command ran, 1 on anything else.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "../vm.h"
#include "../../init/protocol.h"

static unsigned char req[4096];
static size_t req_len = 5; /* the frame's length and type come first */

static void field(char key, const char *v)
{
	uint32_t n = (uint32_t)strlen(v);
	if (req_len + 5 + n > sizeof req)
		return;
	req[req_len++] = (unsigned char)key;
	for (int i = 0; i < 4; i++)
		req[req_len++] = (unsigned char)(n >> (8 * i));
	memcpy(req + req_len, v, n);
	req_len += n;
}

static int read_all(int fd, unsigned char *buf, size_t n)
{
	while (n) {
		ssize_t r = read(fd, buf, n);
		if (r <= 0)
			return -1;
		buf += r;
		n -= (size_t)r;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: agent-probe PROGRAM [ARG...]\n");
		return 1;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	memcpy(a.sun_path + 1, VM_AGENT_NAME, strlen(VM_AGENT_NAME));
	socklen_t al = offsetof(struct sockaddr_un, sun_path) + 1 + strlen(VM_AGENT_NAME);
	if (fd < 0 || connect(fd, (struct sockaddr *)&a, al) < 0) {
		printf("unreachable: %s\n", strerror(errno));
		return 2;
	}
	for (int i = 1; i < argc; i++)
		field('a', argv[i]);
	field('U', "root");
	uint32_t len = (uint32_t)(req_len - 4);
	for (int i = 0; i < 4; i++)
		req[i] = (unsigned char)(len >> (8 * i));
	req[4] = REQ_EXEC;
	if (write(fd, req, req_len) != (ssize_t)req_len)
		return 1;
	static unsigned char buf[1 << 16];
	for (;;) {
		unsigned char head[5];
		if (read_all(fd, head, 5) < 0) {
			fprintf(stderr, "the init closed the connection\n");
			return 1;
		}
		uint32_t n = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
		if (n < 1 || n - 1 > sizeof buf || read_all(fd, buf, n - 1) < 0)
			return 1;
		if (head[4] == REPLY_STDOUT)
			fwrite(buf, 1, n - 1, stdout);
		else if (head[4] == REPLY_DONE)
			return 0;
		else if (head[4] == REPLY_FAILED) {
			fprintf(stderr, "the init refused: ");
			fwrite(buf, 1, n - 1, stderr);
			fprintf(stderr, "\n");
			return 1;
		}
	}
}
