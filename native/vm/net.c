/* warren-vmstage: the guest's network links (loopback at boot, eth0 from the host's HELLO). */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include "vm.h"

static int link_up(int s, const char *ifname)
{
	struct ifreq ifr = { 0 };
	strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -1;
	ifr.ifr_flags |= IFF_UP;
	return ioctl(s, SIOCSIFFLAGS, &ifr);
}

int vm_link_up(const char *ifname)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -1;
	int r = link_up(s, ifname);
	close(s);
	return r;
}

uint32_t vm_link_address(int s, const char *ifname)
{
	struct ifreq ifr = { 0 };
	strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
	uint32_t a = 0;
	if (ioctl(s, SIOCGIFADDR, &ifr) == 0)
		a = ((struct sockaddr_in *)&ifr.ifr_addr)->sin_addr.s_addr;
	return a;
}

static void set_in(struct sockaddr *sa, uint32_t addr)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_addr = { .s_addr = addr } };
	memcpy(sa, &sin, sizeof sin);
}

int vm_link_config(int s, const char *ifname, uint32_t addr, unsigned prefix, uint32_t gateway)
{
	if (prefix > 32)
		return -1;
	struct ifreq ifr = { 0 };
	strncpy(ifr.ifr_name, ifname, IFNAMSIZ - 1);
	/* The address again (a resumed guest has it already) is set anew, and its routes with it. */
	set_in(&ifr.ifr_addr, addr);
	if (ioctl(s, SIOCSIFADDR, &ifr) < 0)
		return -1;
	set_in(&ifr.ifr_netmask, htonl(prefix ? ~0u << (32 - prefix) : 0));
	if (ioctl(s, SIOCSIFNETMASK, &ifr) < 0 || link_up(s, ifname) < 0)
		return -1;
	struct rtentry rt = { 0 };
	set_in(&rt.rt_dst, 0);
	set_in(&rt.rt_genmask, 0);
	set_in(&rt.rt_gateway, gateway);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	if (ioctl(s, SIOCADDRT, &rt) < 0 && errno != EEXIST)
		return -1;
	return 0;
}
