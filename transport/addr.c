/*
 * transport/addr.c - addresses of shards (addr.h): numeric, or a host name
 * through getaddrinfo.
 */
#include <string.h>

#include <event2/util.h>

#include "addr.h"
#include "xfer/errors.h"

int xfer_addr_resolve(const char *addr, struct sockaddr_storage *sa, int *salen)
{
    *salen = sizeof *sa;
    if (!addr || strlen(addr) >= XFER_ADDR_MAX)
        return XFER_ERR_INVALID_ARG;
    if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)sa, salen) == 0)
        return 0;
    char host[XFER_ADDR_MAX];
    strcpy(host, addr);
    char *colon = strrchr(host, ':');
    if (!colon || colon == host || !colon[1])
        return XFER_ERR_INVALID_ARG;
    *colon = '\0';
    struct evutil_addrinfo hints = {.ai_family = AF_UNSPEC,
                                    .ai_socktype = SOCK_STREAM,
                                    .ai_flags = EVUTIL_AI_NUMERICSERV};
    struct evutil_addrinfo *res = NULL;
    if (evutil_getaddrinfo(host, colon + 1, &hints, &res) != 0 || !res)
        return XFER_ERR_INVALID_ARG;
    int rc = XFER_ERR_INVALID_ARG;
    if (res->ai_addrlen <= sizeof *sa) {
        memcpy(sa, res->ai_addr, res->ai_addrlen);
        *salen = (int)res->ai_addrlen;
        rc = 0;
    }
    evutil_freeaddrinfo(res);
    return rc;
}

