/*
 * warren-pageout PID...: asks the kernel to page out the anonymous memory of these (frozen)
 * processes, a paused sandbox's, with process_madvise(MADV_PAGEOUT): it goes to swap (when the
 * host has some). File pages stay: reclaiming one walks every mapping of its file, and the
 * image's files are mapped by every sandbox on the node; an evicted page is faulted back in by
 * the next sandbox, charged to it, and walked again at its pause. Emptying the memory cgroup
 * (memory.force_empty), or paging out file mappings too, made each pause slower than the last.
 *
 * With --private-files first, private file mappings are advised too: the pages a process wrote
 * in them are anonymous (a microVM clone's guest memory, mapped copy-on-write from its template's
 * file; libraries' relocated pages), and the kernel leaves alone the file pages that other
 * processes map as well (every other clone of the template: only pages this process alone maps
 * leave the page cache).
 *
 * Prints the bytes advised; exits 0 unless no process could be read at all.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define BATCH 512
/* Bytes one process_madvise call covers at most: a call runs to its end whatever signal comes,
 * so a page-out that is no longer wanted (the sandbox resumes) ends within one such slice. */
#define SLICE (16UL << 20)

static long advise(int pidfd, struct iovec *iov, int n)
{
	ssize_t r = syscall(SYS_process_madvise, pidfd, iov, n, MADV_PAGEOUT, 0);
	return r > 0 ? r : 0;
}

static long pageout(pid_t pid, int private_files)
{
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (pidfd < 0)
		return -1;
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/maps", pid);
	FILE *maps = fopen(path, "re");
	if (!maps) {
		close(pidfd);
		return -1;
	}
	struct iovec iov[BATCH];
	int n = 0;
	long total = 0, bytes = 0;
	char line[4096];
	while (fgets(line, sizeof line, maps)) {
		unsigned long start, end, offset, inode;
		char perms[8], dev[16];
		if (sscanf(line, "%lx-%lx %7s %lx %15s %lu", &start, &end, perms, &offset, dev, &inode) != 6)
			continue;
		/* Anonymous memory only: a file page is unmapped by walking every mapping of its file,
		 * one per sandbox running the image (see above). The kernel's special mappings cannot be
		 * paged out (and fail the whole call). */
		if ((inode != 0 && !(private_files && perms[3] == 'p')) || strstr(line, "[vsyscall]") || strstr(line, "[vvar") || strstr(line, "[vdso]") || perms[0] != 'r')
			continue;
		/* Regions and batches are cut at SLICE bytes a call. */
		while (start < end) {
			unsigned long len = end - start;
			if (len > SLICE - (unsigned long)bytes)
				len = SLICE - (unsigned long)bytes;
			iov[n].iov_base = (void *)start;
			iov[n].iov_len = len;
			start += len;
			bytes += len;
			if (++n == BATCH || (unsigned long)bytes >= SLICE) {
				total += advise(pidfd, iov, n);
				n = 0;
				bytes = 0;
			}
		}
	}
	if (n > 0)
		total += advise(pidfd, iov, n);
	fclose(maps);
	close(pidfd);
	return total;
}

int main(int argc, char **argv)
{
	long total = 0;
	int ok = 0, first = 1, private_files = 0;
	if (argc > 1 && !strcmp(argv[1], "--private-files")) {
		private_files = 1;
		first = 2;
	}
	for (int i = first; i < argc; i++) {
		char *e;
		long pid = strtol(argv[i], &e, 10);
		if (*e || pid <= 0)
			continue;
		long r = pageout((pid_t)pid, private_files);
		if (r >= 0) {
			total += r;
			ok++;
		}
	}
	printf("%ld\n", total);
	return ok > 0 || argc == first ? 0 : 1;
}
