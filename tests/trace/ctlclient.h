/*
 * tests/trace/ctlclient.h - a test client for the control socket: connect,
 * and read one whole snapshot while pumping the loop that serves it.
 */
#ifndef XFER_CTLCLIENT_H
#define XFER_CTLCLIENT_H

struct event_base;

/* A non-blocking connection to the Unix socket at path (fails the test if
 * it cannot connect). */
int ctl_connect(const char *path);
/* Connect, read until the server closes, pumping `base` meanwhile; returns
 * the NUL-terminated reply (free it). */
char *ctl_fetch(struct event_base *base, const char *path);

#endif /* XFER_CTLCLIENT_H */
