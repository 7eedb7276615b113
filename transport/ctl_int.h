/*
 * transport/ctl_int.h - what the library's own users of xfer_ctl (the
 * engine's control socket) need beyond include/xfer/ctl.h.
 */
#ifndef XFER_TRANSPORT_CTL_INT_H
#define XFER_TRANSPORT_CTL_INT_H

#include "xfer/ctl.h"

/* Call fn(ud) (the snapshot's ud) from xfer_ctl_close, after the last
 * snapshot and before the ctl is freed: the place to free what ud points
 * to.  Loop thread. */
void xfer_ctl_on_close(xfer_ctl *ctl, void (*fn)(void *ud));

#endif /* XFER_TRANSPORT_CTL_INT_H */
