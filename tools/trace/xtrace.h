/*
 * tools/trace/xtrace.h - private pieces of xfer-trace: loading a trace
 * file, rebuilding every transfer from its records (the model), the live
 * snapshot reader, and the commands.
 *
 * Exit codes of every command: 0 done, 1 replay found a divergence, 2 bad
 * usage (flag, argument), 3 bad input (missing, truncated or wrong-version
 * file, unreachable socket, malformed snapshot).
 */
#ifndef XFER_XTRACE_H
#define XFER_XTRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "xfer/core.h"
#include "xfer/fsm.h"
#include "xfer/trace.h"
#include "xfer/tracefile.h"

enum { XT_OK = 0, XT_DIVERGED = 1, XT_USAGE = 2, XT_BADINPUT = 3 };

/* A whole trace in memory: FILE, preceded by the rotated files FILE.N ..
 * FILE.1 that continue into it (consecutive file indices). */
typedef struct xt_file {
    const char *path;
    xfer_tracefile_info info;  /* of FILE itself */
    uint32_t nfiles;           /* files read, FILE included */
    uint32_t first_index;      /* file index of the oldest file read */
    xfer_trace_rec *recs;
    size_t n, cap;
    uint64_t t_first, t_last; /* over records with a time (not CONFIG) */
    uint64_t shards_given;    /* merged: shards whose server's trace is in
                                 (from labels "xferd shards 0,1") */
} xt_file;

/* Load FILE and the rotated files before it (FILE.k, k = 1.. while their
 * file index is FILE's minus k), oldest first.  On failure print one line
 * on stderr and return XT_BADINPUT. */
int xt_load(const char *path, xt_file *f);
void xt_file_free(xt_file *f);
/* Load n files (each with its rotated set: one process each, e.g. the
 * producer, every shard server, the consumer) merged into one by time
 * (merge.c); n == 1 is xt_load. */
int xt_load_many(int n, char **paths, xt_file *f);
/* Who wrote a record: "producer", "shard K" or "consumer" (by its machine,
 * or for notes by its emitter tag); `buf` holds the text when needed. */
const char *xt_src_name(const xfer_trace_rec *r, char *buf, size_t len);

/* One shard's op as seen from the producer's records. */
typedef struct xt_op {
    uint8_t open;    /* an op was sent and no result came yet */
    uint8_t kind;    /* xfer_op_kind of the last op sent */
    uint8_t aborted; /* an ABORT for it was sent */
    uint8_t last_ok; /* result of the last finished op: 1 ok, 0 failed */
    uint64_t sent_ns;
    uint32_t len;    /* RESERVE len (staging bytes of this shard) */
} xt_op;

/* One transfer (one attempt of an id), rebuilt from the records. */
typedef struct xt_xfer {
    uint64_t id;
    uint32_t attempt;
    uint16_t nshards;
    uint8_t state;       /* last TRANSFER new_state */
    bool ended;          /* a COMPLETE action was seen */
    bool partial;        /* its submit is not in the file (rotated away):
                            start_ns is its first record, nshards the
                            shards seen so far */
    bool staging_held;   /* reserve lens counted in staging bytes */
    int32_t status;      /* COMPLETE status */
    uint8_t phase;       /* COMPLETE phase */
    uint64_t failed_shards;
    uint64_t start_ns, end_ns, deadline_ns;
    size_t index;        /* order of submit, from 0 */
    /* A stream (xfer/stream.h): its parts as the trace shows them. */
    bool stream, sealed;
    uint32_t parts_added, parts_back; /* PART inputs, RELEASE_PART actions */
    uint64_t last_part_ns;            /* the last PART input's time */
    xt_op shards[XFER_MAX_SHARDS];
} xt_xfer;

/* What one record did to the model (for export). */
typedef struct xt_effect {
    xt_xfer *x;        /* the transfer the record belongs to, or NULL */
    bool created;      /* this record started the transfer */
    bool state_changed;
    uint8_t prev_state;
    bool op_started, op_ended; /* on shard `shard` */
    bool ended;        /* this record is the COMPLETE action */
    uint16_t shard;
} xt_effect;

typedef struct xt_model {
    xt_xfer **x;
    size_t n, cap;
    uint64_t *keys;  /* id -> index + 1 of its latest attempt */
    size_t *vals;
    size_t mask, used;
    uint64_t staging_in_use;   /* bytes of live transfers' slices */
    uint64_t writes_in_flight;
    /* pending submit input (INPUT SUBMIT precedes its step record) */
    uint64_t sub_id, sub_deadline;
    uint16_t sub_nshards;
} xt_model;

void xt_model_init(xt_model *m);
void xt_model_free(xt_model *m);
/* Apply one record; fills *eff (may be NULL).  Returns 0 or -1 on
 * allocation failure. */
int xt_model_apply(xt_model *m, const xfer_trace_rec *r, xt_effect *eff);
/* The latest attempt of id, or NULL. */
xt_xfer *xt_model_find(const xt_model *m, uint64_t id);
/* Build the model from a whole file. */
int xt_model_build(xt_model *m, const xt_file *f);

/* Formatting helpers. */
void xt_fmt_dur(char *buf, size_t len, uint64_t ns);   /* "12.345678s" */
/* xfer_op_name() in lower case ("reserve", ...), "?" out of range;
 * action and phase names are xfer_action_name() and xfer_phase_name(). */
const char *xt_op_name(unsigned op);
/* Parse "2s", "500ms", "10us", "7ns", "1.5s", "2m"; false when bad. */
bool xt_parse_dur(const char *s, uint64_t *ns);

/* A key's value in one JSON line we (or xfer_ctl) wrote.  `line` is the
 * object text; false when absent. */
bool xt_json_u64(const char *line, const char *key, uint64_t *v);
bool xt_json_i64(const char *line, const char *key, int64_t *v);
bool xt_json_str(const char *line, const char *key, char *buf, size_t len);

/* Commands (argv[0] is the command's name, its flags and operands
 * follow). */
int xt_cmd_summary(int argc, char **argv);
int xt_cmd_stuck(int argc, char **argv);
int xt_cmd_show(int argc, char **argv);
int xt_cmd_replay(int argc, char **argv);
int xt_cmd_export(int argc, char **argv);
int xt_cmd_dot(int argc, char **argv);
int xt_cmd_members(int argc, char **argv);

/* A control socket's whole answer (stuck.c), read within `to` ns: a
 * NUL-terminated malloc'd buffer, or NULL after one line on stderr. */
char *xt_read_socket(const char *path, uint64_t to);

/* Print a usage error line and return XT_USAGE. */
int xt_usage(const char *fmt, const char *arg);
/* A command without flags of its own beyond --help (table c): parse them
 * (tools/cli.h: --help prints and exits, an unknown flag is one line),
 * then leave its operands in argc and argv.  0 or XT_USAGE. */
struct cli;
int xt_args(const struct cli *c, int *argc, char ***argv);

/* A TRANSFER step that starts a transfer: NEW --SUBMIT--> RESERVING, or
 * EAGER on the eager path. */
static inline bool xt_submit_step(const xfer_trace_rec *r)
{
    return r->old_state == XFER_TRANSFER_STATE_NEW &&
           r->event == XFER_TRANSFER_EVENT_SUBMIT &&
           (r->new_state == XFER_TRANSFER_STATE_RESERVING ||
            r->new_state == XFER_TRANSFER_STATE_EAGER);
}

/* A transfer event that is a shard's result (RESERVE_OK .. CANCEL_FAIL,
 * EAGER_OK, EAGER_FAIL): an INPUT record of it carries the op in
 * old_state. */
static inline bool xt_result_event(unsigned ev)
{
    return ev <= XFER_TRANSFER_EVENT_CANCEL_FAIL ||
           ev == XFER_TRANSFER_EVENT_EAGER_OK ||
           ev == XFER_TRANSFER_EVENT_EAGER_FAIL;
}

#endif /* XFER_XTRACE_H */
