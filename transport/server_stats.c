/*
 * transport/server_stats.c - the shard server's counters (of one hosted
 * shard, or summed over all) and its control socket (every open
 * reservation of every hosted shard, xfer/ctl.h).
 *
 * Only reads: nothing here changes a shard or a connection.
 */
#include "server_int.h"
#include "copy.h"

#include <stddef.h>
#include <string.h>

#include "util.h" /* fsm_private_dep: the versioned copy */
#include "xfer/ctl.h"

static void add_shard(const xfer_server_hosted *hs, xfer_server_stats *st)
{
    xfer_shard_stats ss;
    xfer_shard_stats_get(hs->sh, &ss);
    st->nshards++;
    st->pool_bytes += ss.pool_bytes;
    st->bytes_in_use += ss.bytes_in_use;
    st->live += ss.live;
    st->tombstones += ss.tombstones;
    st->reserves += ss.reserves;
    st->refused += ss.refused;
    st->writes += ss.writes;
    st->commits += ss.commits;
    st->cancels += ss.cancels;
    st->expiries += ss.expiries;
    st->takes += ss.takes;
    st->releases += ss.releases;
    st->stale += ss.stale;
    st->illegal += ss.illegal;
    st->events_sent += hs->events_sent;
    st->write_bytes += hs->write_bytes;
    st->taken_now += hs->track.taken;
    st->orphaned_now += hs->track.orphaned;
    st->grace_released += hs->track.grace_released;
    st->rules_fired += hs->rules_fired;
    st->ops_delayed += hs->ops_delayed;
    st->delayed_now += hs->delayed_now;
    st->copies += hs->copies;
    st->copies_failed += hs->copies_failed;
    st->copies_now += xfer_copy_in_flight(hs->cp);
}

/* The bytes each version of xfer_server_stats holds (fsm/util.h). */
static const size_t stats_lens[] = {
    offsetof(xfer_server_stats, rules_fired),
    offsetof(xfer_server_stats, copies), sizeof(xfer_server_stats)};

int xfer_server_stats_get_versioned(const xfer_server *s, uint16_t index,
                                    uint32_t version, xfer_server_stats *st)
{
    if (!s || !st || version == 0 ||
        version > XFER_UTIL_NVERSIONS(stats_lens))
        return XFER_ERR_INVALID_ARG;
    xfer_server_stats cur;
    memset(&cur, 0, sizeof cur);
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        if (index == XFER_SHARD_NONE || s->shards[i].index == index)
            add_shard(&s->shards[i], &cur);
    if (cur.nshards == 0)
        return XFER_ERR_NOT_FOUND;
    cur.conns = s->conns.n;
    cur.bad_frames = s->bad_frames;
    _Static_assert(XFER_SERVER_BAD_REASONS == XFER_WIRE_R_COUNT_,
                   "server.h's reason count follows wire.h");
    memcpy(cur.bad_by_reason, s->bad_by_reason, sizeof cur.bad_by_reason);
    cur.errors_sent = s->errors_sent;
    cur.faults = s->faults;
    cur.subs_dropped = s->subs_dropped;
    cur.auth_failed = s->auth_failed;
    cur.conns_refused = s->conns_refused + s->sess_refused;
    cur.timeouts = s->timeouts;
    cur.writes_stalled = s->writes_stalled;
    cur.out_bytes = s->out_bytes;
    return xfer_util_versioned_copy(st, &cur, version, stats_lens,
                                    XFER_UTIL_NVERSIONS(stats_lens));
}

const char *xfer_server_bad_reason_name(unsigned i)
{
    return xfer_wire_reason_name(i);
}

/* The control socket's snapshot: open reservations, by real shard index
 * (tombstones are skipped by xfer_ctl_put_reservation).  A reply that runs
 * out of memory stops there, as xfer_ctl_shards_snapshot does. */
static void ctl_snapshot(void *ud, xfer_ctl_reply *rep)
{
    xfer_server *s = ud;
    uint64_t now = xfer_server_now(s);
    for (uint16_t i = 0; i < s->cfg.nshards; i++)
        if (xfer_ctl_put_shard(rep, s->shards[i].sh, s->shards[i].index,
                               now) != 0)
            return;
}

int xfer_server_ctl_open(xfer_server *s, const char *path, xfer_ctl **out)
{
    if (!s)
        return XFER_ERR_INVALID_ARG;
    return xfer_ctl_open(s->base, path, ctl_snapshot, s, out);
}
