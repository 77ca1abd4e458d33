// gaitime: how long one getaddrinfo(3) call takes and what it returns, for
// scripts/resolver-failover.sh. Built twice from this file: with gcc
// (glibc's resolver) and statically with musl-gcc (musl's), so that both
// stub resolvers read the same resolv.conf of the network namespace they
// run in (ip netns exec binds /etc/netns/NAME/resolv.conf over it).
//
//   gaitime NAME   one lookup, AF_UNSPEC and SOCK_STREAM with no flags (A and
//                  AAAA, as most programs ask), timed with CLOCK_MONOTONIC;
//                  prints one line and exits 0 whatever the outcome:
//                    ok MS ADDR[,ADDR...]
//                    fail MS EAI_NAME
//
// Build: cc -O2 -o gaitime scripts/gaitime.c
//        musl-gcc -static -O2 -o gaitime-musl scripts/gaitime.c
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static const char *eai_name(int err) {
	switch (err) {
	case EAI_AGAIN: return "EAI_AGAIN";
	case EAI_FAIL: return "EAI_FAIL";
	case EAI_NONAME: return "EAI_NONAME";
#ifdef EAI_NODATA
	case EAI_NODATA: return "EAI_NODATA";
#endif
	case EAI_MEMORY: return "EAI_MEMORY";
	case EAI_SYSTEM: return "EAI_SYSTEM";
	case EAI_FAMILY: return "EAI_FAMILY";
	case EAI_SERVICE: return "EAI_SERVICE";
	default: return "EAI_OTHER";
	}
}

int main(int argc, char **argv) {
	if (argc != 2) {
		fprintf(stderr, "usage: gaitime NAME\n");
		return 64;
	}
	struct addrinfo hints, *res = NULL;
	memset(&hints, 0, sizeof hints);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int err = getaddrinfo(argv[1], NULL, &hints, &res);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
	if (err != 0) {
		printf("fail %.1f %s\n", ms, eai_name(err));
		return 0;
	}
	printf("ok %.1f ", ms);
	const char *sep = "";
	for (struct addrinfo *p = res; p != NULL; p = p->ai_next) {
		char buf[INET6_ADDRSTRLEN];
		const void *a = p->ai_family == AF_INET
			? (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
			: (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
		if (inet_ntop(p->ai_family, a, buf, sizeof buf) != NULL) {
			printf("%s%s", sep, buf);
			sep = ",";
		}
	}
	printf("\n");
	freeaddrinfo(res);
	return 0;
}
