/*
 * warren-hostd: a sandbox network namespace's link to the host, over rtnetlink: the veth pair, its
 * addresses and the sandbox's default route. What `ip -batch` on the host and `nsenter ip -batch`
 * in the namespace did, in this process: two program starts per sandbox were a fifth of a
 * create's CPU.
 */
#include "hostd.h"

#include <arpa/inet.h>
#include <stddef.h>
#include <linux/if_addr.h>
#include <linux/if_link.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

struct nlreq {
	struct nlmsghdr h;
	char body[1024];
};

/* Appends bytes to the request (a header, or an attribute's payload). */
static void put(struct nlreq *r, const void *data, size_t len)
{
	char *at = (char *)r + NLMSG_ALIGN(r->h.nlmsg_len);
	if (len)
		memcpy(at, data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len) + (unsigned)len;
}

/* Appends an attribute; its offset in the request (for a nest's end). */
static size_t attr(struct nlreq *r, unsigned short type, const void *data, size_t len)
{
	size_t off = NLMSG_ALIGN(r->h.nlmsg_len);
	struct rtattr a = { .rta_len = (unsigned short)RTA_LENGTH(len), .rta_type = type };
	put(r, &a, sizeof a);
	put(r, data, len);
	r->h.nlmsg_len = NLMSG_ALIGN(r->h.nlmsg_len);
	return off;
}

/* A nested attribute's length, once what it holds is added. */
static void nest_end(struct nlreq *r, size_t off)
{
	unsigned short len = (unsigned short)(r->h.nlmsg_len - off);
	memcpy((char *)r + off + offsetof(struct rtattr, rta_len), &len, sizeof len);
}

static void start(struct nlreq *r, unsigned short type, unsigned short flags, const void *head, size_t len)
{
	memset(r, 0, sizeof *r);
	r->h.nlmsg_len = (unsigned)NLMSG_LENGTH(len);
	r->h.nlmsg_type = type;
	r->h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	memcpy(NLMSG_DATA(&r->h), head, len);
}

/*
 * Sends requests in one write and reads their acknowledgements into errs (0, or the kernel's
 * errno for each): 0 once all are answered, -1 with errno when the talk itself failed. The kernel
 * does them in order, and still does the ones after a refused one: what they leave goes with the
 * namespace, as after any failure here.
 */
static int talk(int sock, struct nlreq **rs, int *errs, int n)
{
	static unsigned seq;
	struct iovec iov[4];
	if (n < 1 || n > 4) {
		errno = EINVAL;
		return -1;
	}
	unsigned first = seq + 1;
	for (int i = 0; i < n; i++) {
		rs[i]->h.nlmsg_seq = ++seq;
		iov[i] = (struct iovec){ .iov_base = rs[i], .iov_len = NLMSG_ALIGN(rs[i]->h.nlmsg_len) };
	}
	struct sockaddr_nl kernel = { .nl_family = AF_NETLINK };
	struct msghdr m = { .msg_name = &kernel, .msg_namelen = sizeof kernel, .msg_iov = iov, .msg_iovlen = (size_t)n };
	if (sendmsg(sock, &m, 0) < 0)
		return -1;
	int acked = 0;
	char buf[4096];
	while (acked < n) {
		struct sockaddr_nl from;
		socklen_t fl = sizeof from;
		ssize_t got = recvfrom(sock, buf, sizeof buf, 0, (struct sockaddr *)&from, &fl);
		if (got < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		/* Only the kernel's answers: a process in the sandbox's namespace could send this socket its own. */
		if (fl != sizeof from || from.nl_family != AF_NETLINK || from.nl_pid != 0)
			continue;
		for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (unsigned)got); h = NLMSG_NEXT(h, got)) {
			/* Its place in this batch (unsigned: right across the counter's wrap too). */
			unsigned at = h->nlmsg_seq - first;
			if (at >= (unsigned)n || h->nlmsg_type != NLMSG_ERROR || h->nlmsg_len < NLMSG_LENGTH(sizeof(struct nlmsgerr)))
				continue;
			const struct nlmsgerr *e = NLMSG_DATA(h);
			errs[at] = -e->error;
			acked++;
		}
	}
	return 0;
}

/* The first refusal among n answers (0: none). */
static int first_err(const int *errs, int n)
{
	for (int i = 0; i < n; i++)
		if (errs[i])
			return errs[i];
	return 0;
}

/*
 * One request: 0; -1 with errno when the kernel refused it (*refused set: the socket is fine) or
 * the talk itself failed (*refused clear: the socket is not to be used again).
 */
static int talk1(int sock, struct nlreq *r, int *refused)
{
	int err = 0;
	*refused = 0;
	if (talk(sock, &r, &err, 1) < 0)
		return -1;
	*refused = err != 0;
	errno = err;
	return err ? -1 : 0;
}

static void link_up(struct nlreq *r, int index)
{
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC, .ifi_index = index, .ifi_flags = IFF_UP, .ifi_change = IFF_UP };
	start(r, RTM_NEWLINK, 0, &i, sizeof i);
}

/* ADDRESS/31 on the link. */
static void addr_add(struct nlreq *r, int index, struct in_addr a)
{
	struct ifaddrmsg m = { .ifa_family = AF_INET, .ifa_prefixlen = 31, .ifa_index = (unsigned)index };
	start(r, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &m, sizeof m);
	attr(r, IFA_LOCAL, &a, sizeof a);
	attr(r, IFA_ADDRESS, &a, sizeof a);
}

/* The host side makes no IPv6 link-local address of its own (`ip link set addrgenmode none`). */
static void no_addrgen(struct nlreq *r, int index)
{
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC, .ifi_index = index };
	start(r, RTM_NEWLINK, 0, &i, sizeof i);
	size_t spec = attr(r, IFLA_AF_SPEC, NULL, 0);
	size_t inet6 = attr(r, AF_INET6, NULL, 0);
	unsigned char mode = IN6_ADDR_GEN_MODE_NONE;
	attr(r, IFLA_INET6_ADDR_GEN_MODE, &mode, sizeof mode);
	nest_end(r, inet6);
	nest_end(r, spec);
}

/*
 * One queue each way. Without it a veth is made with a queue per possible CPU, each with its
 * sysfs objects, and then cut to one (veth_init_queues), which also waits out an RCU grace
 * period; a sandbox's link carries one flow of traffic at a time through one CPU anyway.
 */
static void one_queue(struct nlreq *r)
{
	unsigned one = 1;
	attr(r, IFLA_NUM_TX_QUEUES, &one, sizeof one);
	attr(r, IFLA_NUM_RX_QUEUES, &one, sizeof one);
}

/* HOSTIF on the host, its peer `eth0` made straight in the namespace `nsfd`. */
static int veth_add(int sock, const char *host_if, int nsfd, int *refused)
{
	struct nlreq r;
	struct ifinfomsg i = { .ifi_family = AF_UNSPEC };
	start(&r, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &i, sizeof i);
	attr(&r, IFLA_IFNAME, host_if, strlen(host_if) + 1);
	one_queue(&r);
	size_t info = attr(&r, IFLA_LINKINFO, NULL, 0);
	attr(&r, IFLA_INFO_KIND, "veth", 4);
	size_t data = attr(&r, IFLA_INFO_DATA, NULL, 0);
	size_t peer = attr(&r, VETH_INFO_PEER, NULL, 0);
	/* The peer's own ifinfomsg comes first in VETH_INFO_PEER, then its attributes. */
	struct ifinfomsg pi = { .ifi_family = AF_UNSPEC };
	put(&r, &pi, sizeof pi);
	attr(&r, IFLA_IFNAME, "eth0", 5);
	one_queue(&r);
	int fd = nsfd;
	attr(&r, IFLA_NET_NS_FD, &fd, sizeof fd);
	nest_end(&r, peer);
	nest_end(&r, data);
	nest_end(&r, info);
	return talk1(sock, &r, refused);
}

/* default via GATEWAY dev INDEX. */
static void default_route(struct nlreq *r, int index, struct in_addr gw)
{
	struct rtmsg m = { .rtm_family = AF_INET, .rtm_table = RT_TABLE_MAIN, .rtm_protocol = RTPROT_BOOT, .rtm_scope = RT_SCOPE_UNIVERSE, .rtm_type = RTN_UNICAST };
	start(r, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &m, sizeof m);
	attr(r, RTA_GATEWAY, &gw, sizeof gw);
	attr(r, RTA_OIF, &index, sizeof index);
}

static int nl_socket(void)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	if (s < 0)
		return -1;
	/* A missing answer must not hold this single-threaded helper for good. */
	struct timeval tv = { .tv_sec = 5 };
	if (setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) < 0) {
		int e = errno;
		close(s);
		errno = e;
		return -1;
	}
	return s;
}

/*
 * "veth NSFD HOSTIF HOSTIP SANDBOXIP": in the namespace this helper holds as NSFD, `eth0` with
 * SANDBOXIP/31, up, its default route via HOSTIP; on the host, its peer HOSTIF with HOSTIP/31, up,
 * without an IPv6 link-local address. A failure part way leaves what closing the namespace removes.
 */
void do_veth(const char *tag, char **f)
{
	char *end;
	long nsfd = strtol(f[0], &end, 10);
	struct in_addr host_ip, sandbox_ip;
	const char *host_if = f[1];
	if (*end || !netns_is_held(nsfd) || !*host_if || strlen(host_if) >= IFNAMSIZ || strchr(host_if, '/') || has_bad(host_if, " \t:") ||
	    inet_pton(AF_INET, f[2], &host_ip) != 1 || inet_pton(AF_INET, f[3], &sandbox_ip) != 1) {
		reply_err(tag, EINVAL, "veth");
		return;
	}
	/* The host's netlink socket is kept from one link to the next (a new one after a failed talk). */
	static int host = -1;
	if (host < 0 && (host = nl_socket()) < 0) {
		reply_err(tag, errno, "veth: netlink");
		return;
	}
	int refused;
	if (veth_add(host, host_if, (int)nsfd, &refused) < 0) {
		int e = errno;
		if (!refused) {
			close(host);
			host = -1;
		}
		reply_err(tag, e, "veth: add");
		return;
	}
	int index = (int)if_nametoindex(host_if);
	if (index <= 0) {
		reply_err(tag, errno, "veth: host side");
		return;
	}
	struct nlreq hr[3];
	int herr[3] = { 0 };
	no_addrgen(&hr[0], index);
	addr_add(&hr[1], index, host_ip);
	link_up(&hr[2], index);
	struct nlreq *hrs[] = { &hr[0], &hr[1], &hr[2] };
	if (talk(host, hrs, herr, 3) < 0) {
		int e = errno;
		close(host);
		host = -1;
		reply_err(tag, e, "veth: host side");
		return;
	}
	/* A host without IPv6 makes no link-local address anyway. */
	if (herr[0] == EAFNOSUPPORT || herr[0] == EOPNOTSUPP)
		herr[0] = 0;
	if (first_err(herr, 3)) {
		reply_err(tag, first_err(herr, 3), "veth: host side");
		return;
	}
	/* A netlink socket made in the namespace talks to it from here; eth0's index is looked up there. */
	int sb = -1, eth0 = 0, e = 0;
	if (netns_enter((int)nsfd) < 0) {
		reply_err(tag, errno, "veth: join namespace");
		return;
	}
	sb = nl_socket();
	e = errno;
	eth0 = (int)if_nametoindex("eth0");
	if (!eth0)
		e = errno;
	netns_leave();
	if (sb < 0 || !eth0) {
		if (sb >= 0)
			close(sb);
		reply_err(tag, e, "veth: in the namespace");
		return;
	}
	struct nlreq sr[3];
	int serr[3] = { 0 };
	addr_add(&sr[0], eth0, sandbox_ip);
	link_up(&sr[1], eth0);
	default_route(&sr[2], eth0, host_ip);
	struct nlreq *srs[] = { &sr[0], &sr[1], &sr[2] };
	e = talk(sb, srs, serr, 3) < 0 ? errno : first_err(serr, 3);
	close(sb);
	if (e)
		reply_err(tag, e, "veth: sandbox side");
	else
		reply_ok(tag);
}
