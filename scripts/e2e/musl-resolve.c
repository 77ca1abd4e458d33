/*
 * musl-resolve: a static resolver client linked against musl libc, for the
 * e2e test's client image (scripts/image.sh client). musl's stub resolver
 * differs from glibc's (it sends the A and AAAA queries of every search-list
 * step in parallel and stops at the first name that exists), so pods on
 * Alpine-based images see the agent through it.
 *
 *   musl-resolve NAME...   print "NAME ADDRESS" for every address of each
 *                          name (getaddrinfo, AF_UNSPEC); exit 2 if a name
 *                          does not resolve.
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

int main(int argc, char **argv) {
	int rc = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: musl-resolve NAME...\n");
		return 64;
	}
	for (int i = 1; i < argc; i++) {
		struct addrinfo hints, *res, *p;
		memset(&hints, 0, sizeof hints);
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		int err = getaddrinfo(argv[i], NULL, &hints, &res);
		if (err != 0) {
			fprintf(stderr, "%s: %s\n", argv[i], gai_strerror(err));
			rc = 2;
			continue;
		}
		for (p = res; p != NULL; p = p->ai_next) {
			char buf[INET6_ADDRSTRLEN];
			const void *a = p->ai_family == AF_INET
				? (const void *)&((struct sockaddr_in *)p->ai_addr)->sin_addr
				: (const void *)&((struct sockaddr_in6 *)p->ai_addr)->sin6_addr;
			if (inet_ntop(p->ai_family, a, buf, sizeof buf) != NULL)
				printf("%s %s\n", argv[i], buf);
		}
		freeaddrinfo(res);
	}
	return rc;
}
