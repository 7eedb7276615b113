/*
 * fsm/errors.c - messages and names for the error space of xfer/errors.h,
 * generated from the same X-macro list as the enum so they cannot drift.
 */
#include "xfer/errors.h"

const char *xfer_strerror(int err)
{
    switch (err) {
#define XFER_ERR_MSG_(name, value, msg)                                       \
    case (value):                                                             \
        return msg;
        XFER_ERRNO_MAP(XFER_ERR_MSG_)
#undef XFER_ERR_MSG_
    default:
        return "unknown error";
    }
}

const char *xfer_err_name(int err)
{
    switch (err) {
#define XFER_ERR_NAME_(name, value, msg)                                      \
    case (value):                                                             \
        return #name;
        XFER_ERRNO_MAP(XFER_ERR_NAME_)
#undef XFER_ERR_NAME_
    default:
        return "UNKNOWN";
    }
}
