/* The length and port of an AF_INET or AF_INET6 socket address (the port
 * read and set in host order), for the layers that keep addresses as
 * struct sockaddr_storage. */
#ifndef SDPSHIM_SOCKADDR_H
#define SDPSHIM_SOCKADDR_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

/* The length of sa, an AF_INET6 address or else an AF_INET one. */
static inline socklen_t sockaddr_len(const struct sockaddr *sa)
{
	return sa->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

/* The port of sa (a struct sockaddr, or a sockaddr_storage holding one);
 * 0 for a family that has none here. */
static inline uint16_t sockaddr_port(const void *addr)
{
	const struct sockaddr *sa = addr;

	if (sa->sa_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	if (sa->sa_family == AF_INET)
		return ntohs(((const struct sockaddr_in *)sa)->sin_port);
	return 0;
}

/* Sets the port of sa (as above); a family that has none is left alone. */
static inline void sockaddr_set_port(void *addr, uint16_t port)
{
	struct sockaddr *sa = addr;

	if (sa->sa_family == AF_INET6)
		((struct sockaddr_in6 *)sa)->sin6_port = htons(port);
	else if (sa->sa_family == AF_INET)
		((struct sockaddr_in *)sa)->sin_port = htons(port);
}

#endif
