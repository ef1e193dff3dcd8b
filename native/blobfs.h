// warren-blobfs's files share this header: the blob and the daemon's state, and what one file offers the others.
#ifndef WARREN_BLOBFS_H
#define WARREN_BLOBFS_H

#define _GNU_SOURCE
#define FUSE_USE_VERSION 312
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <openssl/evp.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (1u << 20) // the unit of fetching, caching and checking
#define MAP_MAGIC "WBFSMAP1"
#define MAP_HEADER 24
#define NAME_LEN 69 // 64 hex + ".data"

enum { ABSENT = 0, PRESENT = 1, FETCHING = 2 };

struct blob {
  char hex[65];
  fuse_ino_t ino; // blobs[ino - 2]
  uint64_t size;
  uint32_t nblocks;
  char *url;
  int fd, mapfd;
  uint8_t *state; // per block: ABSENT, PRESENT, FETCHING
  uint64_t *used; // per block: tick of the last read
  uint8_t *hashes; // per block: its sha256
  int opens;
  uint32_t next, window; // read-ahead: the block after the last read, and how far ahead to fetch
};

// The daemon's state: its options, the blobs it knows, the cache's totals (g.mu guards them).
struct blobfs {
  const char *url, *cache, *sources;
  uint64_t max_bytes;
  int cachefd, srcfd;
  struct curl_slist *headers;
  pthread_mutex_t mu;
  pthread_cond_t cv;
  struct blob **blobs; // inode N (N >= 2) is blobs[N - 2]
  size_t nblobs, cap;
  uint64_t cached; // bytes of blocks present
  uint64_t tick;
  uint64_t fetched, fetches, evicted; // counters, logged at exit
};
extern struct blobfs g;


// blobfs.c
void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int valid_hex(const char *s, size_t n);
uint64_t block_bytes(const struct blob *b, uint32_t i);

// blobfs-fetch.c (curl_key: each thread's curl handle, made on first use)
extern pthread_key_t curl_key;
void free_curl(void *c);
int head_size(const char *url, uint64_t *size);
int fetch_range(struct blob *b, uint64_t start, uint64_t want);

// blobfs-cache.c (read-ahead: at most ahead_max blocks ahead, in requests of ahead_run)
extern uint32_t ahead_max, ahead_run;
struct blob *find_blob(const char *hex);
struct blob *blob_at(fuse_ino_t ino);
struct blob *open_blob(const char *hex, uint64_t size, const char *url, int load);
int source_of(const char *hex, char *url, size_t urlsz, uint64_t *size);
void load_cache(void);
void trim_locked(void);
void *prefetcher(void *arg);
int ensure(struct blob *b, uint32_t first, uint32_t last);

#endif
