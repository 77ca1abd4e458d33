// gailoop: lookups per second through the real glibc resolver, for
// scripts/bench.sh's pod workload. THREADS threads call getaddrinfo(3)
// (AF_UNSPEC, SOCK_STREAM, AI_ADDRCONFIG: what a dual-stack client asks,
// A and AAAA) on the names of FILE in turn, each thread starting at its
// own offset, for SECONDS seconds; then it prints one line:
//
//   lookups N ok N failed N seconds S lookups_per_s X p50_us P p99_us Q
//
// The resolver reads /etc/resolv.conf of the network namespace it runs in
// (ip netns exec binds /etc/netns/NAME/resolv.conf there): search list,
// ndots and nameserver are what the pod would have. A failed lookup
// (any getaddrinfo error) is counted, never retried. Bounded: SECONDS and
// at most 64 threads and 100000 names.
//
// Build: cc -O2 -pthread -o gailoop scripts/gailoop.c
#define _GNU_SOURCE
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#define MAX_THREADS 64
#define MAX_NAMES 100000
// Latency histogram: 10 µs buckets up to 1 s, then one overflow bucket.
#define BUCKET_US 10
#define BUCKETS 100001

static char *names[MAX_NAMES];
static int nnames;
static double deadline;

struct worker {
  pthread_t t;
  int offset;
  uint64_t ok, failed;
  uint64_t *hist;
};

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *run(void *arg) {
  struct worker *w = arg;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_ADDRCONFIG;
  for (int i = w->offset;; i++) {
    double start = now();
    if (start >= deadline) break;
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(names[i % nnames], NULL, &hints, &res);
    double took = now() - start;
    if (rc == 0) {
      w->ok++;
      freeaddrinfo(res);
    } else {
      w->failed++;
    }
    long b = (long)(took * 1e6 / BUCKET_US);
    if (b >= BUCKETS) b = BUCKETS - 1;
    w->hist[b]++;
  }
  return NULL;
}

static long percentile(uint64_t *hist, uint64_t total, double p) {
  uint64_t want = (uint64_t)(total * p), seen = 0;
  for (long b = 0; b < BUCKETS; b++) {
    seen += hist[b];
    if (seen > want) return b * BUCKET_US;
  }
  return (BUCKETS - 1) * BUCKET_US;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s THREADS SECONDS NAMEFILE\n", argv[0]);
    return 2;
  }
  int threads = atoi(argv[1]);
  double secs = atof(argv[2]);
  if (threads < 1 || threads > MAX_THREADS || secs <= 0 || secs > 3600) {
    fprintf(stderr, "gailoop: THREADS 1-%d, SECONDS (0, 3600]\n", MAX_THREADS);
    return 2;
  }
  FILE *f = fopen(argv[3], "r");
  if (!f) {
    fprintf(stderr, "gailoop: %s: %s\n", argv[3], strerror(errno));
    return 1;
  }
  char line[512];
  while (nnames < MAX_NAMES && fgets(line, sizeof line, f)) {
    line[strcspn(line, " \t\r\n")] = 0;
    if (line[0]) names[nnames++] = strdup(line);
  }
  fclose(f);
  if (nnames == 0) {
    fprintf(stderr, "gailoop: no names in %s\n", argv[3]);
    return 1;
  }
  struct worker w[MAX_THREADS];
  double start = now();
  deadline = start + secs;
  for (int i = 0; i < threads; i++) {
    w[i].offset = i * (nnames / threads + 1);
    w[i].ok = w[i].failed = 0;
    w[i].hist = calloc(BUCKETS, sizeof(uint64_t));
    if (!w[i].hist || pthread_create(&w[i].t, NULL, run, &w[i]) != 0) {
      fprintf(stderr, "gailoop: starting thread %d failed\n", i);
      return 1;
    }
  }
  uint64_t ok = 0, failed = 0;
  uint64_t *hist = calloc(BUCKETS, sizeof(uint64_t));
  for (int i = 0; i < threads; i++) {
    pthread_join(w[i].t, NULL);
    ok += w[i].ok;
    failed += w[i].failed;
    for (long b = 0; b < BUCKETS; b++) hist[b] += w[i].hist[b];
  }
  double took = now() - start;
  uint64_t total = ok + failed;
  printf("lookups %llu ok %llu failed %llu seconds %.2f lookups_per_s %.0f p50_us %ld p99_us %ld\n",
         (unsigned long long)total, (unsigned long long)ok, (unsigned long long)failed, took, total / took,
         percentile(hist, total, 0.50), percentile(hist, total, 0.99));
  return 0;
}
