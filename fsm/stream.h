/*
 * fsm/stream.h - a stream's part of a transfer record (docs/design.md 2.5):
 * its parts, each shard's cursor through them, and the ranges the parts
 * will leave written on each shard.
 *
 * The container (fsm/core.c) allocates the stream at open and each part at
 * xfer_core_part, and frees a part once the machine released it (its
 * RELEASE_PART is in the action list) and the stream when the record
 * ends; the machine's handlers (fsm/transfer.c) only move them.
 */
#ifndef XFER_FSM_STREAM_H
#define XFER_FSM_STREAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "xfer/core.h"
#include "xfer/shard.h"

/* A part: its runs sorted by (shard, resv_off) and joined where contiguous
 * in both staging and reservation, then nshards + 1 start indexes (shard
 * k's runs are r[start[k]] .. r[start[k + 1] - 1]). */
typedef struct xfer_part {
    uint32_t seq;      /* 1, 2, ... in the order the parts were added */
    uint32_t n;        /* runs */
    uint32_t unsent;   /* runs not yet sent */
    uint16_t inflight; /* writes of it in flight (<= nshards) */
    uint8_t released;  /* RELEASE_PART emitted; the container frees it */
    uint8_t failed;    /* one of its writes failed */
    xfer_range r[];    /* n runs, then uint32_t start[nshards + 1] */
} xfer_part;

static inline uint32_t *xfer_part_start(xfer_part *p)
{
    return (uint32_t *)(void *)(p->r + p->n);
}

/* Bytes of a part of n runs over nshards. */
static inline size_t xfer_part_size(uint32_t n, uint16_t nshards)
{
    return sizeof(xfer_part) + (size_t)n * sizeof(xfer_range) +
           ((size_t)nshards + 1) * sizeof(uint32_t);
}

/* The ranges written on a shard once its accepted runs succeeded, as the
 * shard keeps them: sorted, disjoint, not touching; the cap is the
 * shard's prefix plus XFER_SHARD_MAX_FRAGMENTS. */
#define XFER_STREAM_SPANS (XFER_SHARD_MAX_FRAGMENTS + 1)
typedef struct xfer_spans {
    uint32_t n;
    uint32_t v[XFER_STREAM_SPANS + 1][2]; /* one spare for an add */
} xfer_spans;

/* Add [a, b) (merging what it overlaps or touches).  False, t untouched,
 * when the result would pass the shard's cap. */
bool xfer_spans_add(xfer_spans *t, uint32_t a, uint32_t b);

typedef struct xfer_stream_shard {
    uint32_t cur_seq;  /* the part the cursor is in (0: before the first) */
    uint32_t cur_idx;  /* its next run (an index into r[]) */
    uint32_t fly_seq;  /* the part of the write in flight; 0: none */
    uint32_t pad_;
    xfer_spans spans;  /* what the accepted runs leave written */
} xfer_stream_shard;

typedef struct xfer_stream {
    uint32_t next_seq; /* the next part's number (from 1) */
    uint32_t nparts;   /* parts[0..nparts): not yet freed, in seq order */
    uint8_t sealed;
    uint8_t pad_[7];
    xfer_part *parts[XFER_STREAM_MAX_PARTS];
    xfer_stream_shard sh[];
} xfer_stream;

static inline size_t xfer_stream_size(uint16_t nshards)
{
    return sizeof(xfer_stream) + (size_t)nshards * sizeof(xfer_stream_shard);
}

#endif /* XFER_FSM_STREAM_H */
