/*
 * tools/check/stub/readiness_int.h - stand-in for fsm/readiness_int.h while
 * the readiness tracker is not in the tree (see stub_consumer.c).
 */
#ifndef XFER_CHECK_STUB_READINESS_INT_H
#define XFER_CHECK_STUB_READINESS_INT_H
#include <stddef.h>
#include <stdint.h>
#include "xfer/readiness.h"
size_t xfer_readiness_save(const xfer_readiness *r, uint8_t *buf, size_t len);
int xfer_readiness_load(xfer_readiness *r, const uint8_t *buf, size_t len);
#endif
