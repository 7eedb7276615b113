/*
 * transport/metrics_int.h - the text builder the exposition is rendered
 * with (metrics_text.c) and the per-object renderers metrics.c calls.
 */
#ifndef XFER_METRICS_INT_H
#define XFER_METRICS_INT_H

#include "xfer/consumer.h"
#include "xfer/server.h"
#include "xfer/tcp.h"
#include "xfer/dir.h"
#include "xfer/xfer.h"

struct evbuffer;

typedef struct xfer_metrics_text {
    struct evbuffer *b;
    int err;
} xfer_metrics_text;

void xfer_metrics_add(xfer_metrics_text *t, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void xfer_metrics_engine(xfer_metrics_text *t, const xfer_engine *e);
void xfer_metrics_server(xfer_metrics_text *t, const xfer_server *s);
void xfer_metrics_consumer(xfer_metrics_text *t, const xfer_consumer *c);
void xfer_metrics_tcp(xfer_metrics_text *t, const xfer_tcp *tcp);
void xfer_metrics_dir(xfer_metrics_text *t, const xfer_dir *d);

#endif /* XFER_METRICS_INT_H */
