/*
 * fsm/save.c - what every save of fsm/save.h shares: its header.  The
 * machines' own formats are in core_save.c, shard_save.c and
 * readiness_save.c.
 */
#include "save.h"

int xfer_save_peek(const uint8_t *buf, size_t len, xfer_save_machine *machine,
                   unsigned *version)
{
    if (!buf || len < XFER_SAVE_HDR || buf[0] != 'X' || buf[2] != 'S' ||
        (buf[1] != XFER_SAVE_CORE && buf[1] != XFER_SAVE_SHARD &&
         buf[1] != XFER_SAVE_READINESS))
        return XFER_ERR_FORMAT;
    if (machine)
        *machine = (xfer_save_machine)buf[1];
    if (version)
        *version = buf[3];
    return 0;
}
