/*
 * transport/addr.h - "ip:port", "[v6]:port" or "host:port" to a socket
 * address, for the producer's transport and the consumer's links (static
 * lists may name hosts; the directory's entries may too).
 */
#ifndef XFER_TRANSPORT_ADDR_H
#define XFER_TRANSPORT_ADDR_H

#include <sys/socket.h>

#define XFER_ADDR_MAX 64 /* bytes of an address string, NUL included */

/* Numeric first (evutil_parse_sockaddr_port); else the host part is
 * resolved with getaddrinfo (blocking: at creation, or when the directory
 * names a host), the first answer taken.  0 or XFER_ERR_INVALID_ARG. */
int xfer_addr_resolve(const char *addr, struct sockaddr_storage *sa,
                      int *salen);

#endif
