/*
 * The guest's end of the agent mux: one virtio-serial port carries every connection the edge
 * makes to the sandbox's init (a container's init gets each as a connection on its socket; a
 * microVM has one port). Each stream the host opens becomes a connection to the init's abstract
 * socket, bytes copied both ways within the credit each side grants (so a host that stops
 * reading one stream holds back that stream only, and no buffer here grows past VM_WINDOW per
 * stream). Frames are described in vm.h. A host that disconnects (the edge restarted) ends
 * every stream; the next one starts afresh.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/random.h>
#include <sys/ioctl.h>
#include "vm.h"

struct stream {
	uint32_t id;
	int fd;		    /* connection to the init; -1: slot free */
	uint32_t credit;    /* bytes the host lets us send on it */
	unsigned char *out; /* from the host, not yet written to the init */
	size_t out_len;
	int host_eof, sock_eof;
};

static struct stream streams[VM_MAX_STREAMS];
static int port_fd = -1;
static int rw_fd = -1;
static int inet_fd = -1; /* an AF_INET socket of the guest's network namespace (the mux runs in another) */

int vm_sysfs_find(const char *dir, const char *attr, const char *want, char *out, size_t n)
{
	for (int tries = 0; tries < 1000; tries++) {
		DIR *d = opendir(dir);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			if (e->d_name[0] == '.')
				continue;
			char p[300], s[128] = { 0 };
			snprintf(p, sizeof p, "%s/%s/%s", dir, e->d_name, attr);
			int fd = open(p, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			ssize_t r = read(fd, s, sizeof s - 1);
			close(fd);
			if (r > 0) {
				s[strcspn(s, "\n")] = 0;
				if (!strcmp(s, want)) {
					snprintf(out, n, "/dev/%s", e->d_name);
					closedir(d);
					return 0;
				}
			}
		}
		if (d)
			closedir(d);
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return -1;
}

/* Writes all of buf to the port (it may be non-blocking: waits for room). */
static int port_write(const unsigned char *buf, size_t n)
{
	while (n) {
		ssize_t w = write(port_fd, buf, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN) {
				struct pollfd p = { port_fd, POLLOUT, 0 };
				poll(&p, 1, 100);
				continue;
			}
			return -1;
		}
		buf += w;
		n -= (size_t)w;
	}
	return 0;
}

static void put32(unsigned char *p, uint32_t v)
{
	p[0] = v >> 24;
	p[1] = v >> 16;
	p[2] = v >> 8;
	p[3] = v;
}

static uint32_t get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int send_frame(int type, uint32_t id, const void *payload, uint32_t len)
{
	unsigned char h[VM_HEADER];
	h[0] = (unsigned char)type;
	put32(h + 1, id);
	put32(h + 5, len);
	if (port_write(h, sizeof h) < 0)
		return -1;
	return len ? port_write(payload, len) : 0;
}

static struct stream *find(uint32_t id)
{
	for (int i = 0; i < VM_MAX_STREAMS; i++)
		if (streams[i].fd >= 0 && streams[i].id == id)
			return &streams[i];
	return NULL;
}

static void drop(struct stream *s, int tell)
{
	if (tell)
		send_frame(VM_CLOSE, s->id, NULL, 0);
	close(s->fd);
	free(s->out);
	memset(s, 0, sizeof *s);
	s->fd = -1;
}

static void drop_all(void)
{
	for (int i = 0; i < VM_MAX_STREAMS; i++)
		if (streams[i].fd >= 0)
			drop(&streams[i], 0);
}

static struct stream *free_slot(uint32_t id)
{
	if (find(id))
		return NULL;
	for (int i = 0; i < VM_MAX_STREAMS; i++)
		if (streams[i].fd < 0)
			return &streams[i];
	return NULL;
}

static void open_stream(uint32_t id, const struct sockaddr_un *agent, socklen_t al)
{
	struct stream *s = free_slot(id);
	int fd = s ? socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0) : -1;
	if (fd < 0 || connect(fd, (const struct sockaddr *)agent, al) < 0) {
		if (fd >= 0)
			close(fd);
		send_frame(VM_CLOSE, id, NULL, 0);
		return;
	}
	fcntl(fd, F_SETFL, O_NONBLOCK);
	s->id = id;
	s->fd = fd;
	s->credit = VM_WINDOW;
}

/* A stream whose bytes a child writes: the writable layer as a tar (see VM_EXPORT in vm.h). */
static void export_stream(uint32_t id)
{
	struct stream *s = free_slot(id);
	int sv[2];
	if (!s || rw_fd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		send_frame(VM_CLOSE, id, NULL, 0);
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		close(sv[0]);
		close(sv[1]);
		send_frame(VM_CLOSE, id, NULL, 0);
		return;
	}
	if (pid == 0) {
		close(sv[0]);
		close(port_fd);
		_exit(vm_export_upper(rw_fd, sv[1]));
	}
	close(sv[1]);
	fcntl(sv[0], F_SETFL, O_NONBLOCK);
	s->id = id;
	s->fd = sv[0];
	s->credit = VM_WINDOW;
}

/* The guest's caches given back (see VM_RECLAIM in vm.h); answers CLOSE on `id` once done. */
static void reclaim(uint32_t id)
{
	sync();
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		if (write(fd, "3", 1) < 0) {
			/* nothing to give back then */
		}
		close(fd);
	}
	send_frame(VM_CLOSE, id, NULL, 0);
}

/* Writes what the host sent to the init; grants the host that much again. */
static void flush_out(struct stream *s)
{
	size_t done = 0;
	while (done < s->out_len) {
		ssize_t w = write(s->fd, s->out + done, s->out_len - done);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				break;
			drop(s, 1);
			return;
		}
		done += (size_t)w;
	}
	if (done) {
		memmove(s->out, s->out + done, s->out_len - done);
		s->out_len -= done;
		unsigned char c[4];
		put32(c, (uint32_t)done);
		send_frame(VM_CREDIT, s->id, c, 4);
	}
	if (!s->out_len && s->host_eof == 1) {
		shutdown(s->fd, SHUT_WR);
		s->host_eof = 2;
	}
	if (s->host_eof == 2 && s->sock_eof)
		drop(s, 1);
}

/* The sandbox's /etc/resolv.conf (the mux's root is the sandbox's): never through a link. */
static void write_resolv_conf(const unsigned char *p, size_t n)
{
	int fd = open("/etc/resolv.conf", O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	if (write(fd, p, n) != (ssize_t)n)
		fprintf(stderr, "warren-vmstage: /etc/resolv.conf: %s\n", strerror(errno));
	close(fd);
}

/*
 * A new host (see VM_HELLO in vm.h): the streams of the one before end; the clock, the kernel's
 * random state and the hostname become this sandbox's. A payload too short is ignored.
 */
static void hello(const unsigned char *p, uint32_t len)
{
	drop_all();
	if (len < 8 + VM_SEED + VM_LINK + 2)
		return;
	uint64_t ns = (uint64_t)get32(p) << 32 | get32(p + 4);
	struct timespec now = { (time_t)(ns / 1000000000u), (long)(ns % 1000000000u) };
	clock_settime(CLOCK_REALTIME, &now);
	struct {
		struct rand_pool_info info;
		unsigned char seed[VM_SEED];
	} pool = { .info = { .entropy_count = VM_SEED * 8, .buf_size = VM_SEED } };
	memcpy(pool.seed, p + 8, VM_SEED);
	int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd >= 0) {
		ioctl(fd, RNDADDENTROPY, &pool);
		ioctl(fd, RNDRESEEDCRNG);
		close(fd);
	}
	memset(&pool, 0, sizeof pool);
	const unsigned char *link = p + 8 + VM_SEED;
	uint32_t addr, gateway;
	memcpy(&addr, link, 4);
	memcpy(&gateway, link + 5, 4);
	const unsigned char *conf = link + VM_LINK + 2;
	size_t conf_len = (size_t)link[VM_LINK] << 8 | link[VM_LINK + 1];
	if (conf_len > len - 8 - VM_SEED - VM_LINK - 2)
		return;
	if (addr) {
		int fresh = vm_link_address(inet_fd, "eth0") != addr;
		if (vm_link_config(inet_fd, "eth0", addr, link[4], gateway) < 0)
			fprintf(stderr, "warren-vmstage: eth0: %s\n", strerror(errno));
		else if (fresh && conf_len)
			write_resolv_conf(conf, conf_len);
	}
	const unsigned char *name = conf + conf_len;
	size_t hn = len - (size_t)(name - p);
	if (hn > 0 && hn <= 64)
		sethostname((const char *)name, hn);
}

/* One frame from the host. */
static void on_frame(int type, uint32_t id, const unsigned char *p, uint32_t len, const struct sockaddr_un *agent, socklen_t al)
{
	if (type == VM_OPEN) {
		open_stream(id, agent, al);
		return;
	}
	if (type == VM_EXPORT) {
		export_stream(id);
		return;
	}
	if (type == VM_HELLO) {
		hello(p, len);
		return;
	}
	if (type == VM_RECLAIM) {
		reclaim(id);
		return;
	}
	struct stream *s = find(id);
	if (!s)
		return; /* closed here meanwhile */
	switch (type) {
	case VM_DATA:
		if (s->out_len + len > VM_WINDOW || s->host_eof) {
			drop(s, 1); /* past the credit granted: the host broke the protocol on this stream */
			return;
		}
		unsigned char *grown = realloc(s->out, s->out_len + len);
		if (!grown) {
			drop(s, 1);
			return;
		}
		s->out = grown;
		memcpy(s->out + s->out_len, p, len);
		s->out_len += len;
		flush_out(s);
		break;
	case VM_EOF:
		s->host_eof = 1;
		flush_out(s);
		break;
	case VM_CLOSE:
		drop(s, 0);
		break;
	case VM_CREDIT:
		if (len == 4)
			s->credit += get32(p);
		break;
	}
}

int vm_mux_run(const char *port, const struct sockaddr_un *agent, socklen_t al, int inet, int rw)
{
	rw_fd = rw;
	inet_fd = inet;
	signal(SIGCHLD, SIG_IGN); /* an export's child is reaped by the kernel */
	for (int i = 0; i < VM_MAX_STREAMS; i++)
		streams[i].fd = -1;
	port_fd = open(port, O_RDWR | O_CLOEXEC | O_NONBLOCK);
	if (port_fd < 0) {
		perror("warren-vmstage: open the agent port");
		return 1;
	}
	/* SIGIO, held pending, says the host came back (see the hang-up below). */
	sigset_t sigio;
	sigemptyset(&sigio);
	sigaddset(&sigio, SIGIO);
	sigprocmask(SIG_BLOCK, &sigio, NULL);
	if (fcntl(port_fd, F_SETOWN, getpid()) < 0 || fcntl(port_fd, F_SETFL, O_NONBLOCK | O_ASYNC) < 0)
		perror("warren-vmstage: SIGIO on the agent port");
	static unsigned char in[VM_HEADER + VM_MAX_PAYLOAD];
	static unsigned char buf[VM_MAX_PAYLOAD];
	size_t in_len = 0;
	static struct pollfd pfd[VM_MAX_STREAMS + 1];
	static struct stream *who[VM_MAX_STREAMS + 1];
	for (;;) {
		int n = 0;
		pfd[n] = (struct pollfd){ port_fd, POLLIN, 0 };
		who[n++] = NULL;
		for (int i = 0; i < VM_MAX_STREAMS; i++) {
			struct stream *s = &streams[i];
			if (s->fd < 0)
				continue;
			short ev = (s->credit && !s->sock_eof ? POLLIN : 0) | (s->out_len ? POLLOUT : 0);
			if (!ev)
				continue;
			pfd[n] = (struct pollfd){ s->fd, ev, 0 };
			who[n++] = s;
		}
		if (poll(pfd, n, -1) < 0) {
			if (errno == EINTR)
				continue;
			return 1;
		}
		/* With the host gone the port polls readable and hung up, and reads 0. */
		ssize_t r = pfd[0].revents & POLLIN ? read(port_fd, in + in_len, sizeof in - in_len) : 0;
		if (r > 0) {
			in_len += (size_t)r;
			size_t off = 0;
			while (in_len - off >= VM_HEADER) {
				uint32_t len = get32(in + off + 5);
				if (len > VM_MAX_PAYLOAD) { /* not our protocol: start again */
					drop_all();
					off = in_len;
					break;
				}
				if (in_len - off < VM_HEADER + len)
					break;
				on_frame(in[off], get32(in + off + 1), in + off + VM_HEADER, len, agent, al);
				off += VM_HEADER + len;
			}
			memmove(in, in + off, in_len - off);
			in_len -= off;
		} else if (pfd[0].revents & (POLLHUP | POLLERR) || (pfd[0].revents & POLLIN && r == 0)) {
			/*
			 * The host end is gone (the edge restarted, or this is a template): its streams
			 * with it. The port stays so until the host is back, which the driver signals
			 * with SIGIO: wait for that (a second at most) rather than spin.
			 */
			drop_all();
			in_len = 0;
			struct timespec ts = { 1, 0 };
			sigtimedwait(&sigio, NULL, &ts);
			continue;
		}
		for (int k = 1; k < n; k++) {
			struct stream *s = who[k];
			if (s->fd < 0 || s->fd != pfd[k].fd)
				continue; /* dropped by a frame above */
			if (pfd[k].revents & POLLOUT)
				flush_out(s);
			if (s->fd < 0)
				continue;
			if (pfd[k].revents & (POLLIN | POLLHUP | POLLERR)) {
				size_t want = s->credit < sizeof buf ? s->credit : sizeof buf;
				if (!want || s->sock_eof)
					continue;
				ssize_t r = read(s->fd, buf, want);
				if (r > 0) {
					s->credit -= (uint32_t)r;
					send_frame(VM_DATA, s->id, buf, (uint32_t)r);
				} else if (r == 0) {
					s->sock_eof = 1;
					send_frame(VM_EOF, s->id, NULL, 0);
					if (s->host_eof == 2)
						drop(s, 1);
				} else if (errno != EAGAIN && errno != EINTR)
					drop(s, 1);
			}
		}
	}
}
