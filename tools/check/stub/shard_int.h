/*
 * tools/check/stub/shard_int.h - stand-in for fsm/shard_int.h while the
 * consumer shard is not in the tree (see stub_consumer.c).
 */
#ifndef XFER_CHECK_STUB_SHARD_INT_H
#define XFER_CHECK_STUB_SHARD_INT_H
#include <stddef.h>
#include <stdint.h>
#include "xfer/shard.h"
size_t xfer_shard_save(const xfer_shard *s, uint8_t *buf, size_t len);
int xfer_shard_load(xfer_shard *s, const uint8_t *buf, size_t len);
#endif
