/*
 * transport/metrics_text.c - the Prometheus text exposition (0.0.4) of an
 * engine, a shard server and a consumer (xfer/metrics.h).
 *
 * What must stay true: every family is announced once, HELP then TYPE,
 * before its samples; counters end in _total; a histogram's buckets are
 * cumulative, in increasing `le` order, end with le="+Inf" equal to
 * _count, and come with _sum (seconds) and _count; label values are only
 * digits or fixed words, so nothing needs escaping.  The values are the
 * objects' stats as their stats calls (and the wire STATUS) report them.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "consumer_int.h"
#include "engine_int.h"
#include "metrics_int.h"
#include "server_int.h"
#include "xfer/metrics.h"

void xfer_metrics_add(xfer_metrics_text *t, const char *fmt, ...)
{
    if (t->err)
        return;
    va_list ap;
    va_start(ap, fmt);
    if (evbuffer_add_vprintf(t->b, fmt, ap) < 0)
        t->err = XFER_ERR_NOMEM;
    va_end(ap);
}

static void fam(xfer_metrics_text *t, const char *name, const char *type,
                const char *help)
{
    xfer_metrics_add(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name,
                     type);
}

/* One sample; labels is "" or `k="v",...` without braces. */
static void val(xfer_metrics_text *t, const char *name, const char *labels,
                uint64_t v)
{
    xfer_metrics_add(t, "%s%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "",
                     labels, *labels ? "}" : "", v);
}

/* One counter or gauge family with a single unlabelled sample. */
static void one(xfer_metrics_text *t, const char *name, const char *type,
                const char *help, uint64_t v)
{
    fam(t, name, type, help);
    val(t, name, "", v);
}

/* The samples of one histogram (its family announced by the caller). */
static void hist(xfer_metrics_text *t, const char *name, const char *labels,
                 const xfer_hist *h)
{
    uint64_t cum = 0;
    const char *sep = *labels ? "," : "";
    for (unsigned i = 0; i < XFER_HIST_BUCKETS; i++) {
        cum += h->bucket[i];
        xfer_metrics_add(t, "%s_bucket{%s%sle=\"%.6g\"} %" PRIu64 "\n", name,
                         labels, sep, (double)xfer_hist_bound_ns(i) / 1e9,
                         cum);
    }
    xfer_metrics_add(t, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name,
                     labels, sep, h->count);
    xfer_metrics_add(t, "%s_sum%s%s%s %.9f\n", name, *labels ? "{" : "",
                     labels, *labels ? "}" : "", (double)h->sum_ns / 1e9);
    xfer_metrics_add(t, "%s_count%s%s%s %" PRIu64 "\n", name,
                     *labels ? "{" : "", labels, *labels ? "}" : "",
                     h->count);
}

/* ---------------------------------------------------------------------- */
/* Engine                                                                  */
/* ---------------------------------------------------------------------- */

void xfer_metrics_engine(xfer_metrics_text *t, const xfer_engine *e)
{
    static const char *const outcomes[] = {"ok", "failed", "cancelled"};
    static const char *const phases[] = {"none", "reserving", "writing",
                                         "completing", "cancelling",
                                         "submit"};
    xfer_engine_stats st;
    xfer_engine_stats_get(e, &st);
    const xfer_core_stats *c = &st.core;
    one(t, "xfer_engine_transfers_submitted_total", "counter",
        "Transfers accepted by the engine.", c->submitted);
    fam(t, "xfer_engine_transfers_total", "counter",
        "Transfers ended, by outcome.");
    val(t, "xfer_engine_transfers_total", "outcome=\"ok\"", c->succeeded);
    val(t, "xfer_engine_transfers_total", "outcome=\"failed\"", c->failed);
    val(t, "xfer_engine_transfers_total", "outcome=\"cancelled\"",
        c->cancelled);
    fam(t, "xfer_engine_transfers_failed_total", "counter",
        "Failed or cancelled transfers, by the phase they failed in.");
    for (unsigned p = XFER_PHASE_RESERVING; p <= XFER_PHASE_SUBMIT; p++) {
        char l[32];
        snprintf(l, sizeof l, "phase=\"%s\"", phases[p]);
        val(t, "xfer_engine_transfers_failed_total", l,
            p == XFER_PHASE_SUBMIT ? st.posts_refused
                                   : xfer_engine_failed_in_phase(e, p));
    }
    one(t, "xfer_engine_transfers_live", "gauge",
        "Transfers in flight.", c->live);
    fam(t, "xfer_engine_late_events_total", "counter",
        "Late events rejected: submits of tombstoned ids, replies for "
        "ended transfers, replies for ids never seen.");
    val(t, "xfer_engine_late_events_total", "kind=\"submit\"",
        c->late_submits);
    val(t, "xfer_engine_late_events_total", "kind=\"reply\"",
        c->late_replies);
    val(t, "xfer_engine_late_events_total", "kind=\"unknown\"",
        c->unknown_replies);
    one(t, "xfer_engine_tombstones", "gauge", "Tombstones held.",
        c->tombstones);
    one(t, "xfer_engine_tombstones_busy_total", "counter",
        "Calls refused because the tombstone table was full.",
        c->tombstone_busy);
    one(t, "xfer_engine_cancel_retries_total", "counter",
        "Cancel retries sent to shards.", c->cancel_retries);
    one(t, "xfer_engine_cancel_gave_up_total", "counter",
        "Shards whose cancel retries ran out.", c->cancel_gave_up);
    one(t, "xfer_engine_staging_bytes_in_use", "gauge",
        "Staging bytes of transfers whose staging is not released.",
        st.staging_bytes_in_use);
    one(t, "xfer_engine_ops_start_failed_total", "counter",
        "Shard ops the transport refused to start.", st.ops_start_failed);
    one(t, "xfer_engine_cancels_refused_total", "counter",
        "Cancels refused XFER_ERR_BUSY (the tombstone table was full).",
        st.cancels_refused);
    one(t, "xfer_engine_transfers_abandoned_total", "counter",
        "Transfers whose rollback the shutdown deadline cut short "
        "(XFER_ERR_ABANDONED).", st.abandoned);
    fam(t, "xfer_engine_transfer_seconds", "histogram",
        "From an accepted submit to its completion, by outcome.");
    for (unsigned o = 0; o < XFER_ENGINE_OUTCOMES; o++) {
        char l[32];
        snprintf(l, sizeof l, "outcome=\"%s\"", outcomes[o]);
        hist(t, "xfer_engine_transfer_seconds", l, xfer_engine_latency(e, o));
    }
}

/* ---------------------------------------------------------------------- */
/* Server                                                                  */
/* ---------------------------------------------------------------------- */

typedef struct shard_val {
    const char *name, *type, *help;
    size_t off; /* offsetof(xfer_server_stats, field) */
} shard_val;

#define SV(name, type, field, help)                                           \
    {name, type, help, offsetof(xfer_server_stats, field)}

static const shard_val shard_vals[] = {
    SV("xfer_server_pool_bytes", "gauge", pool_bytes, "Pool size."),
    SV("xfer_server_pool_bytes_in_use", "gauge", bytes_in_use,
       "Pool bytes reserved, written, ready or taken."),
    SV("xfer_server_reservations_live", "gauge", live,
       "Live reservations."),
    SV("xfer_server_tombstones", "gauge", tombstones, "Tombstones held."),
    SV("xfer_server_refused_total", "counter", refused,
       "Requests the shard refused (answered with ERROR)."),
    SV("xfer_server_expiries_total", "counter", expiries,
       "Reservations freed by their lease."),
    SV("xfer_server_events_sent_total", "counter", events_sent,
       "Events sent to subscribers."),
    SV("xfer_server_write_bytes_total", "counter", write_bytes,
       "Bytes written into the pool."),
    SV("xfer_server_taken", "gauge", taken_now,
       "Regions taken by consumers and not released."),
    SV("xfer_server_taken_orphaned", "gauge", orphaned_now,
       "Taken regions whose consumer connection is gone (grace running)."),
    SV("xfer_server_grace_released_total", "counter", grace_released,
       "Taken regions released by the grace period."),
    SV("xfer_server_crc_checked_total", "counter", crc_checked,
       "Regions checksummed before READY (integrity)."),
    SV("xfer_server_corrupt_total", "counter", corrupt,
       "Regions refused before READY: checksum mismatch, data corrupt."),
};

static uint64_t field(const xfer_server_stats *st, size_t off)
{
    uint64_t v;
    memcpy(&v, (const char *)st + off, sizeof v);
    return v;
}

static void server_ops(xfer_metrics_text *t, const xfer_server *s,
                       const xfer_server_stats *per)
{
    static const char *const ops[] = {"reserve", "write", "commit",
                                      "cancel", "take", "release"};
    fam(t, "xfer_server_ops_total", "counter",
        "Ops applied by the shard, by kind.");
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        const xfer_server_stats *st = &per[i];
        const uint64_t v[] = {st->reserves, st->writes, st->commits,
                              st->cancels, st->takes, st->releases};
        for (unsigned o = 0; o < 6; o++) {
            char l[48];
            snprintf(l, sizeof l, "shard=\"%u\",op=\"%s\"",
                     (unsigned)s->shards[i].index, ops[o]);
            val(t, "xfer_server_ops_total", l, v[o]);
        }
    }
}

static void server_phases(xfer_metrics_text *t, const xfer_server *s)
{
    fam(t, "xfer_server_phase_seconds", "histogram",
        "Time between a reservation's phases: reserved to ready, ready to "
        "taken, taken to released.");
    for (uint16_t i = 0; i < s->cfg.nshards; i++) {
        const xfer_server_hosted *hs = &s->shards[i];
        const xfer_hist *h[] = {&hs->h_ready, &hs->h_taken, &hs->h_released};
        static const char *const ph[] = {"reserved_to_ready",
                                         "ready_to_taken",
                                         "taken_to_released"};
        for (unsigned p = 0; p < 3; p++) {
            char l[64];
            snprintf(l, sizeof l, "shard=\"%u\",phase=\"%s\"",
                     (unsigned)hs->index, ph[p]);
            hist(t, "xfer_server_phase_seconds", l, h[p]);
        }
    }
}

static void server_whole(xfer_metrics_text *t, const xfer_server *s)
{
    xfer_server_stats all;
    xfer_server_stats_get(s, XFER_SHARD_NONE, &all);
    fam(t, "xfer_server_bad_frames_total", "counter",
        "Connections closed for bad input, by reason.");
    for (unsigned r = 1; r < XFER_SERVER_BAD_REASONS; r++) {
        char l[48];
        snprintf(l, sizeof l, "reason=\"%s\"", xfer_server_bad_reason_name(r));
        val(t, "xfer_server_bad_frames_total", l, all.bad_by_reason[r]);
    }
    one(t, "xfer_server_errors_sent_total", "counter",
        "ERROR replies sent.", all.errors_sent);
    one(t, "xfer_server_connections", "gauge", "Connections open.",
        all.conns);
    one(t, "xfer_server_subscribers_dropped_total", "counter",
        "Subscribers dropped for falling behind.", all.subs_dropped);
    one(t, "xfer_server_faults_injected_total", "counter",
        "Faults injected for tests (fault_ppm, drop_ppm).", all.faults);
}

void xfer_metrics_server(xfer_metrics_text *t, const xfer_server *s)
{
    xfer_server_stats per[XFER_MAX_SHARDS];
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        xfer_server_stats_get(s, s->shards[i].index, &per[i]);
    for (size_t v = 0; v < sizeof shard_vals / sizeof shard_vals[0]; v++) {
        fam(t, shard_vals[v].name, shard_vals[v].type, shard_vals[v].help);
        for (uint16_t i = 0; i < s->cfg.nshards; i++) {
            char l[24];
            snprintf(l, sizeof l, "shard=\"%u\"",
                     (unsigned)s->shards[i].index);
            val(t, shard_vals[v].name, l, field(&per[i], shard_vals[v].off));
        }
    }
    server_ops(t, s, per);
    server_phases(t, s);
    server_whole(t, s);
}

/* ---------------------------------------------------------------------- */
/* Consumer                                                                */
/* ---------------------------------------------------------------------- */

void xfer_metrics_consumer(xfer_metrics_text *t, const xfer_consumer *c)
{
    xfer_consumer_stats st;
    xfer_consumer_stats_get(c, &st);
    one(t, "xfer_consumer_available_total", "counter",
        "Ids reported available (every shard taken).", st.available);
    fam(t, "xfer_consumer_unavailable_total", "counter",
        "Ids reported unavailable, by reason.");
    val(t, "xfer_consumer_unavailable_total", "reason=\"timeout\"",
        st.unavailable_timeout);
    val(t, "xfer_consumer_unavailable_total", "reason=\"cancelled\"",
        st.unavailable_cancelled);
    val(t, "xfer_consumer_unavailable_total", "reason=\"expired\"",
        st.unavailable_expired);
    val(t, "xfer_consumer_unavailable_total", "reason=\"conn_lost\"",
        st.unavailable_conn_lost);
    val(t, "xfer_consumer_unavailable_total", "reason=\"take_failed\"",
        st.unavailable_take_failed);
    one(t, "xfer_consumer_links_up", "gauge", "Shard connections up.",
        st.links_up);
    one(t, "xfer_consumer_connects_total", "counter",
        "Shard connections established.", st.connects);
    one(t, "xfer_consumer_link_losses_total", "counter",
        "Shard connections lost.", st.losses);
    one(t, "xfer_consumer_reconnects_total", "counter",
        "Dials after a link's first, each after the backoff.",
        st.reconnects);
    one(t, "xfer_consumer_crc_checked_total", "counter",
        "Regions checksummed again on take (integrity consumer).",
        st.crc_checked);
    one(t, "xfer_consumer_corrupt_total", "counter",
        "Taken regions that no longer matched their checksum: released, "
        "the id unavailable.",
        st.corrupt);
    one(t, "xfer_consumer_request_timeouts_total", "counter",
        "Links taken down for a request not answered in time.",
        st.request_timeouts);
    one(t, "xfer_consumer_bad_frames_total", "counter",
        "Shard connections closed for bad input.", st.bad_frames);
    fam(t, "xfer_consumer_events_total", "counter",
        "Shard events received, by kind.");
    val(t, "xfer_consumer_events_total", "kind=\"ready\"", st.ready_events);
    val(t, "xfer_consumer_events_total", "kind=\"ended\"", st.ended_events);
    one(t, "xfer_consumer_events_dropped_total", "counter",
        "Events the tracker could not take (caps).", st.dropped_events);
    fam(t, "xfer_consumer_requests_total", "counter",
        "Requests sent to shards, by kind.");
    val(t, "xfer_consumer_requests_total", "op=\"take\"", st.takes_sent);
    val(t, "xfer_consumer_requests_total", "op=\"release\"",
        st.releases_sent);
    val(t, "xfer_consumer_requests_total", "op=\"cancel\"", st.cancels_sent);
    one(t, "xfer_consumer_takes_failed_total", "counter", "Takes failed.",
        st.takes_failed);
    one(t, "xfer_consumer_late_ready_total", "counter",
        "Late ready events rejected (answered with a cancel).",
        st.late_ready);
    one(t, "xfer_consumer_tombstones", "gauge", "Tombstones held.",
        st.tombstones);
    one(t, "xfer_consumer_ids_pending", "gauge",
        "Ids waiting or expected.", st.pending);
    one(t, "xfer_consumer_ids_held", "gauge",
        "Ids available and not released.", st.held);
    one(t, "xfer_consumer_held_bytes", "gauge",
        "Bytes of the ids held.", st.held_bytes);
    fam(t, "xfer_consumer_outcome_seconds", "histogram",
        "From an id's first ready (or expect) to its outcome.");
    hist(t, "xfer_consumer_outcome_seconds", "", &c->h_outcome);
    fam(t, "xfer_consumer_take_seconds", "histogram",
        "From a take sent to its answer.");
    hist(t, "xfer_consumer_take_seconds", "", &c->h_take);
}

/* ---------------------------------------------------------------------- */
/* The producer's TCP transport                                            */
/* ---------------------------------------------------------------------- */

void xfer_metrics_tcp(xfer_metrics_text *t, const xfer_tcp *tcp)
{
    xfer_tcp_stats st;
    xfer_tcp_stats_get(tcp, &st);
    one(t, "xfer_tcp_connects_total", "counter",
        "Shard connections established (HELLO answered).", st.connects);
    one(t, "xfer_tcp_reconnects_total", "counter",
        "Dials after a connection's first, each after the backoff.",
        st.reconnects);
    one(t, "xfer_tcp_crcs_sent_total", "counter",
        "COMMITs and EAGERs sent with their slice's CRC32C (integrity).",
        st.crcs_sent);
    one(t, "xfer_tcp_connect_failures_total", "counter",
        "Dials that failed or broke before HELLO was answered.",
        st.connect_failures);
    one(t, "xfer_tcp_losses_total", "counter",
        "Shard connections lost after they were up.", st.losses);
    one(t, "xfer_tcp_bad_frames_total", "counter",
        "Shard connections closed for bad input.", st.bad_frames);
    one(t, "xfer_tcp_bad_replies_total", "counter",
        "Replies refused (each failed its op with XFER_ERR_PROTO).",
        st.bad_replies);
    one(t, "xfer_tcp_shard_gone_total", "counter",
        "Shards that left their group (directory), their ops failed with "
        "XFER_ERR_SHARD_GONE.", st.gones);
    one(t, "xfer_tcp_shard_moves_total", "counter",
        "Shards given a new address by the directory.", st.moves);
    one(t, "xfer_tcp_failed_gone_total", "counter",
        "Ops failed with XFER_ERR_SHARD_GONE.", st.failed_gone);
}

/* ---------------------------------------------------------------------- */
/* The directory (etcd)                                                    */
/* ---------------------------------------------------------------------- */

void xfer_metrics_dir(xfer_metrics_text *t, const xfer_dir *d)
{
    xfer_dir_state st;
    xfer_dir_state_get_latest(d, &st);
    one(t, "xfer_dir_connected", "gauge",
        "1 when the last request to etcd was answered.", st.connected);
    one(t, "xfer_dir_revision", "gauge", "The last etcd revision seen.",
        (uint64_t)(st.revision > 0 ? st.revision : 0));
    one(t, "xfer_dir_members", "gauge",
        "Members known over every watched group.", st.members);
    one(t, "xfer_dir_registered", "gauge",
        "Entries this process keeps registered.", st.registered);
    one(t, "xfer_dir_endpoint", "gauge", "Index of the etcd endpoint in use.",
        st.endpoint);
    one(t, "xfer_dir_failures_total", "counter",
        "Requests to etcd that failed (each moved to the next endpoint).",
        st.failures);
    one(t, "xfer_dir_events_total", "counter", "Watch events read.",
        st.events);
    one(t, "xfer_dir_bad_entries_total", "counter",
        "Entries ignored as malformed or hostile.", st.bad_entries);
    one(t, "xfer_dir_stale_entries_total", "counter",
        "Entries ignored for an epoch below the known one.",
        st.stale_entries);
    one(t, "xfer_dir_lease_grants_total", "counter",
        "Leases granted (more than one: the registration was put again).",
        st.lease_grants);
    one(t, "xfer_dir_watch_timeouts_total", "counter",
        "Watch streams silent past watch_timeout_ns, closed and reopened.",
        st.watch_timeouts);
}
