// glibc-loop: getaddrinfo(3) in a loop through the pod's own resolv.conf,
// for scripts/e2e.sh's availability steps. THREADS threads look up the
// names given (AF_UNSPEC, SOCK_STREAM: A and AAAA, with the search list
// and ndots the pod has) in turn for SECONDS seconds, one lookup after the
// other with PAUSE_MS between two (a steady load, not a flood), and then it
// prints one JSON line:
//
//   {"lookups":N,"ok":N,"failed":N,"fail_pct":P,"longest_gap_ms":G,
//    "gap_at_s":T,"p50_ms":..,"p99_ms":..,"max_ms":..}
//
// longest_gap_ms is the longest time without a successful lookup ending
// (from the start to the first, between two, from the last to the end).
// Bounded: at most 16 threads, 64 names, an hour and 1,000,000 lookups
// kept.
//
// Usage: glibc-loop THREADS SECONDS PAUSE_MS NAME...
// Build: cc -O2 -pthread -o glibc-loop scripts/e2e/glibc-loop.c
#define _GNU_SOURCE
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_THREADS 16
#define MAX_NAMES 64
#define MAX_KEPT 1000000

static const char *names[MAX_NAMES];
static int nnames;
static double t0, deadline;
static struct timespec pause_ts;

struct rec {
  double end, took;
  int ok;
};
static struct rec *recs;
static long nrecs;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg) {
  long i = (long)arg;
  struct addrinfo hints;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  while (now() < deadline) {
    const char *name = names[i++ % nnames];
    struct addrinfo *res = NULL;
    double start = now();
    int rc = getaddrinfo(name, NULL, &hints, &res);
    double end = now();
    if (res) freeaddrinfo(res);
    pthread_mutex_lock(&mu);
    if (nrecs < MAX_KEPT) {
      recs[nrecs].end = end - t0;
      recs[nrecs].took = end - start;
      recs[nrecs].ok = rc == 0;
      nrecs++;
    }
    pthread_mutex_unlock(&mu);
    if (pause_ts.tv_sec || pause_ts.tv_nsec) nanosleep(&pause_ts, NULL);
  }
  return NULL;
}

static int cmpd(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: glibc-loop THREADS SECONDS PAUSE_MS NAME...\n");
    return 2;
  }
  int threads = atoi(argv[1]);
  double seconds = atof(argv[2]);
  int pause_ms = atoi(argv[3]);
  if (threads < 1 || threads > MAX_THREADS || seconds <= 0 || seconds > 3600 || pause_ms < 0 || pause_ms > 10000) {
    fprintf(stderr, "glibc-loop: THREADS 1 to %d, SECONDS up to 3600, PAUSE_MS 0 to 10000\n", MAX_THREADS);
    return 2;
  }
  pause_ts.tv_sec = pause_ms / 1000;
  pause_ts.tv_nsec = (long)(pause_ms % 1000) * 1000000L;
  for (int i = 4; i < argc && nnames < MAX_NAMES; i++) names[nnames++] = argv[i];
  recs = calloc(MAX_KEPT, sizeof *recs);
  double *ends = calloc(MAX_KEPT, sizeof *ends), *took = calloc(MAX_KEPT, sizeof *took);
  if (!recs || !ends || !took) return 1;
  t0 = now();
  deadline = t0 + seconds;
  pthread_t t[MAX_THREADS];
  for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(i * 7));
  for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
  double total = now() - t0;
  long ok = 0, nends = 0;
  for (long i = 0; i < nrecs; i++) {
    took[i] = recs[i].took;
    if (recs[i].ok) {
      ok++;
      ends[nends++] = recs[i].end;
    }
  }
  qsort(ends, nends, sizeof *ends, cmpd);
  qsort(took, nrecs, sizeof *took, cmpd);
  double gap = 0, gapat = 0, prev = 0;
  for (long i = 0; i <= nends; i++) {
    double e = i < nends ? ends[i] : total;
    if (e - prev > gap) {
      gap = e - prev;
      gapat = prev;
    }
    prev = e;
  }
  double p50 = nrecs ? took[nrecs / 2] : 0, p99 = nrecs ? took[nrecs * 99 / 100] : 0, mx = nrecs ? took[nrecs - 1] : 0;
  printf("{\"lookups\":%ld,\"ok\":%ld,\"failed\":%ld,\"fail_pct\":%.3f,\"longest_gap_ms\":%.1f,\"gap_at_s\":%.3f,"
         "\"p50_ms\":%.2f,\"p99_ms\":%.2f,\"max_ms\":%.1f}\n",
         nrecs, ok, nrecs - ok, nrecs ? 100.0 * (nrecs - ok) / nrecs : 0, gap * 1000, gapat, p50 * 1000, p99 * 1000, mx * 1000);
  return 0;
}
