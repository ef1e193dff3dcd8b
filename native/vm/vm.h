/* warren-vmstage: a microVM's first PID 1 (stage.c) and the agent's mux over virtio-serial (mux.c). */
#ifndef WARREN_VM_H
#define WARREN_VM_H
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

/*
 * The abstract Unix socket the init listens on inside the guest, in a network namespace of its
 * own (abstract names are per network namespace): only the mux, which runs in it, can name it;
 * the sandbox's processes, whatever their user, cannot connect to the init as the edge does.
 */
#define VM_AGENT_NAME "warren-agent"

/*
 * The mux's frames, both ways over the port: type (1 byte), stream (4, big-endian), length (4,
 * big-endian), payload. Streams are opened by the host. Each side may send DATA on a stream only
 * within the credit the other granted (VM_WINDOW at the open, then CREDIT frames as it consumes).
 * HELLO (stream 0) is the host's first frame on every connection: the streams of an earlier
 * host end, and the guest takes the payload as who and when it now is (a guest restored from a
 * snapshot or a save has another's or an old clock, hostname and random state): the host's
 * CLOCK_REALTIME (8 bytes, ns, big-endian), VM_SEED bytes of randomness for the kernel's pool
 * (reseeded at once), its link (VM_LINK bytes: eth0's IPv4 address, its prefix length, the
 * default gateway; an address of 0 leaves eth0 as it is), the sandbox's /etc/resolv.conf (2
 * bytes of length, big-endian, then the bytes; written when eth0 gets an address it did not
 * have: a clone's first HELLO, not a restored guest's again), then the hostname.
 * EXPORT opens a stream, as OPEN does, whose bytes are the writable layer as a layer tar
 * (export.c, its file system frozen meanwhile) and which ends with it; a tar without its end
 * marker is one that failed.
 * RECLAIM (the host's, for an idle guest) writes the guest's dirty pages back and drops its page
 * and slab caches (freed pages are zeroed: init_on_free=1), then answers CLOSE on its id: what
 * the guest freed is zero when the host pages its memory out, and swaps for nothing.
 */
enum { VM_OPEN = 1, VM_DATA = 2, VM_EOF = 3, VM_CLOSE = 4, VM_CREDIT = 5, VM_HELLO = 6, VM_EXPORT = 7, VM_RECLAIM = 8 };
#define VM_SEED 32
#define VM_LINK 9
#define VM_HEADER 9
#define VM_WINDOW (256 * 1024)
#define VM_MAX_PAYLOAD (64 * 1024)
#define VM_MAX_STREAMS 1024

/*
 * The /dev path of the device under sysfs `dir` whose `attr` reads `want` (a disk by its serial,
 * a virtio-serial port by its name), waiting up to 10 s for it to appear; -1 if none did.
 */
int vm_sysfs_find(const char *dir, const char *attr, const char *want, char *out, size_t n);
/* Link `ifname`'s IPv4 address (network order), asked through the AF_INET socket `s`; 0 if it has none. */
uint32_t vm_link_address(int s, const char *ifname);
/* Sets link `ifname` up; -1 with errno on failure. */
int vm_link_up(const char *ifname);
/*
 * Gives link `ifname` the IPv4 address `addr`/`prefix` (network order), sets it up, and routes
 * by default through `gateway`, through the AF_INET socket `s` (its network namespace's links);
 * -1 with errno on failure.
 */
int vm_link_config(int s, const char *ifname, uint32_t addr, unsigned prefix, uint32_t gateway);
/* Writes the writable layer under `rw` (its upper/) to `out` as a layer tar; 0 when all of it was written. */
int vm_export_upper(int rw, int out);
/*
 * Carries streams between the port and the init's socket until the port fails; the exit status.
 * It runs in the init socket's network namespace; `inet`: an AF_INET socket made in the guest's
 * (its eth0 is configured through it). `rw`: a descriptor of the writable disk's file system
 * (EXPORT), -1 if none.
 */
int vm_mux_run(const char *port, const struct sockaddr_un *agent, socklen_t agent_len, int inet, int rw);

#endif
