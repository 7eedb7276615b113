#!/usr/bin/env python3
# tests/check/mutate.py - write a deliberately broken copy of one source
# file (a mutant) for the xfer-check mutant tests.  The production sources
# are never touched: meson compiles the copy into a mutant library that only
# the mutant checkers link.
#
#   mutate.py NAME SRC OUT
#
# Each mutant replaces one exact snippet; if the snippet is not found exactly
# once (the source moved on), the build fails loudly instead of silently
# testing an unbroken copy.
import sys

MUTANTS = {
    # The reservation fan-out acts on the first error without waiting for
    # the other shards: the first failure drains the phase at once.
    'fanout_first_error': (
        'transfer.c',
        '        note_failure(t, r->shard, r->status, XFER_PHASE_RESERVING);\n'
        '    }\n'
        '    if (--t->pending == 0)',
        '        note_failure(t, r->shard, r->status, XFER_PHASE_RESERVING);\n'
        '        t->pending = 1;\n'
        '    }\n'
        '    if (--t->pending == 0)'),
    # Staging is released as soon as one write fails, while the writes to
    # the other shards are still in flight.
    'staging_early': (
        'transfer.c',
        '        note_failure(t, r->shard, r->status, XFER_PHASE_WRITING);\n',
        '        note_failure(t, r->shard, r->status, XFER_PHASE_WRITING);\n'
        '        push(c, t, XFER_ACT_RELEASE_STAGING, XFER_SHARD_NONE);\n'),
    # A rollback whose cancel RPC failed drops the tombstone, so a late
    # submit (ready) recreates the transfer.
    'tomb_dropped': (
        'core.c',
        '    xfer_tomb_insert_held(&core->tombs, now, t->id, t->attempt, reason);\n',
        '    if (t->rollback_failed)\n'
        '        xfer_tomb_unhold(&core->tombs);\n'
        '    else\n'
        '        xfer_tomb_insert_held(&core->tombs, now, t->id, t->attempt,\n'
        '                              reason);\n'),
    # The user-cancel exit path returns before reporting completion.
    'skip_complete': (
        'transfer.c',
        'static void finish(xfer_transfer *t, xfer_transfer_ctx *c)\n{\n',
        'static void finish(xfer_transfer *t, xfer_transfer_ctx *c)\n{\n'
        '    if (t->status == XFER_ERR_CANCELLED) {\n'
        '        push(c, t, XFER_ACT_RELEASE_STAGING, XFER_SHARD_NONE);\n'
        '        t->state = XFER_TRANSFER_STATE_TOMBSTONED;\n'
        '        set_timer(t, XFER_TIMER_NONE, 0);\n'
        '        return;\n'
        '    }\n'),
    # The success path reports the completion twice.
    'double_complete': (
        'transfer.c',
        '        t->failed_shards = 0;\n        finish(t, c);\n',
        '        t->failed_shards = 0;\n        finish(t, c);\n'
        '        push(c, t, XFER_ACT_COMPLETE, XFER_SHARD_NONE)->result.id =\n'
        '            t->id;\n'),
    # Cancellation stops at the first shard whose cancel RPC failed: no
    # shard is retried after a failed cancel.
    'cancel_stops': (
        'transfer.c',
        '        retry = retry || t->shards[k].cancel == XFER_SUB_FAILED;\n',
        '        retry = false;\n'),
    # A cancel that gave up is not reported in rollback_failed (issue 14).
    'rollback_unreported': (
        'transfer.c',
        '        t->rollback_failed |= UINT64_C(1) << r->shard;\n',
        ''),
    # The shard's cancel ignores the attempt it names: attempt 2's rollback
    # frees attempt 1's committed data (issue 14, I14).
    'cancel_any_attempt': (
        'shard.c',
        '                   .has_attempt = attempt != 0,\n',
        '                   .has_attempt = false,\n'),
    # The shard's default lease is a tenth of the documented 10 s (issue
    # 14, class 1: found only when the checker runs the defaults).
    'lease_default': (
        'shard.c',
        '        c->lease_ttl_ns = 10ull * 1000000000ull;\n',
        '        c->lease_ttl_ns = 1ull * 1000000000ull;\n'),
    # The core's default deadline is ten times the documented 30 s.
    'deadline_default': (
        'core.c',
        '        c->default_deadline_ns = 30ull * 1000000000ull;\n',
        '        c->default_deadline_ns = 300ull * 1000000000ull;\n'),
    # The core's default tombstone TTL is ten times the documented 60 s.
    'tomb_ttl_default': (
        'core.c',
        '        c->tombstone_ttl_ns = 60ull * 1000000000ull;\n',
        '        c->tombstone_ttl_ns = 600ull * 1000000000ull;\n'),
    # The shard's default tombstone TTL is ten times the documented 20 s
    # (twice the lease): caught by the TIME monitor of shard tombstones,
    # which takes each one's start from the move that made it.
    'shard_tomb_ttl_default': (
        'shard.c',
        '                                  : 2 * c->lease_ttl_ns;\n',
        '                                  : 20 * c->lease_ttl_ns;\n'),
    # The tracker's default deadline is a tenth of the documented 30 s.
    'ready_deadline_default': (
        'readiness.c',
        '        c->deadline_ns = 30ull * 1000000000ull;\n',
        '        c->deadline_ns = 3ull * 1000000000ull;\n'),
    # The core takes a reply of another attempt for its own (issue 14,
    # class 2: found only with --dups, which injects such replies).
    'attempt_filter': (
        'transfer.c',
        '    if (r->shard >= t->nshards || r->attempt != t->attempt)\n',
        '    if (r->shard >= t->nshards)\n'),
    # A write's end returns the reservation to RESERVED while another
    # write into it is still landing (found only with --writes 2).
    'write_end_early': (
        'shard.c',
        '    if (--r->writes == 0) {\n'
        '        r->flags &= (uint8_t)~XFER_SHARD_F_MULTI;\n',
        '    if (r->writes-- != 0) {\n'
        '        r->flags &= (uint8_t)~XFER_SHARD_F_MULTI;\n'),
    # Issue 30: merging a written range into the ones before it forgets
    # the lower end, so writes in order of offsets cover less than they
    # wrote and the commit is refused INCOMPLETE (tools/mutate sample
    # fsm/shard.c:481:drop:0; test_shard saw it, the checker did not
    # before --writes parts ran alone and COVER).
    'cover_lower_end': (
        'shard.c',
        '            a = x < a ? x : a;\n',
        '            {}\n'),
    # Issue 30: the commit rule ignores what was written: a region with a
    # gap (a part lost on the way) is committed.
    'commit_over_gap': (
        'shard.c',
        '    if (!s->cfg.one_sided && o->rec->covered < o->rec->len)\n'
        '        return XFER_ERR_INCOMPLETE;\n',
        '    if (!s->cfg.one_sided && o->rec->covered < o->rec->len && 0)\n'
        '        return XFER_ERR_INCOMPLETE;\n'),
    # A one-sided shard frees a cancelled RESERVED region at once, without
    # waiting for its rkey's invalidation: a posted write lands in the
    # freed region (issue 15; found only with --rdma).
    'free_before_invalidate': (
        'shard.c',
        '        return XFER_ERR_BUSY;\n'
        '    if (s->cfg.one_sided && o->step.from == XFER_RESV_STATE_RESERVED) {\n'
        '        start_invalidation(s, o, XFER_RESV_STATE_CANCEL_INVAL, true);\n',
        '        return XFER_ERR_BUSY;\n'
        '    if (0) {\n'
        '        start_invalidation(s, o, XFER_RESV_STATE_CANCEL_INVAL, true);\n'),
    # A one-sided shard publishes a commit READY before the rkey is
    # invalidated: a write can still change READY bytes (issue 15).
    'ready_before_invalidate': (
        'shard.c',
        '    if (s->cfg.one_sided) {\n'
        '        o->rec->covered = o->rec->len; /* as a committed record\'s is */\n',
        '    if (0) {\n'
        '        o->rec->covered = o->rec->len; /* as a committed record\'s is */\n'),
    # Issue 25: the shard ends a write into a device pool when its bytes
    # reached the bounce buffer, not when the copy into the region ended:
    # a cancel or lease expiry meanwhile frees the region under the copy
    # (found only with --copies, monitor CFREE).
    # Issue 30 item 4(b) for --copies: a server model that never starts a
    # copy (every device write ends as a host one) holds every invariant;
    # the run must say that --copies was never reached.
    'copies_never': (
        'consumer.c',
        '    if (m.op == XFER_OP_WRITE && (m.flags & MF_BEGUN) && w->cfg->copies &&\n',
        '    if (m.op == XFER_OP_WRITE && (m.flags & MF_BEGUN) && 0 &&\n'),
    # Issue 25: the engine hands a WRITE of device staging to the transport
    # when its device-to-host copy starts, not when it ended: the op's
    # result, and so the staging release, can come while the copy still
    # reads staging (I3; found only with --copies).
    'staging_before_d2h': (
        'engine.c',
        '    if (w->cfg->copies && m.op == XFER_OP_WRITE)\n'
        '        m.flags |= MF_D2H;\n',
        '    if (w->cfg->copies && m.op == XFER_OP_WRITE) {\n'
        '        ck_msg c = m;\n'
        '        c.flags |= MF_D2H | MF_ORPHAN;\n'
        '        ck_net_push(w, &c);\n'
        '    }\n'),
    'write_end_at_bounce': (
        'shard.c',
        '    o.rec->copies++;\n'
        '    return 0;\n',
        '    xfer_shard_write_end(s, now_ns, id, resv_id, true);\n'
        '    return 0;\n'),
    # Issue 25: the shard server (tools/check/consumer.c, the world's model
    # of transport/server_copy.c) ends the write and answers its WRITE_ACK
    # when the bytes reached the bounce buffer, while the copy into the
    # region still runs: the commit publishes READY under the copy
    # (monitor CREADY).
    'ready_before_copy': (
        'consumer.c',
        '    ck_reach_note(w, CK_R_COPY);\n'
        '    m.flags |= MF_COPY;\n',
        '    ck_reach_note(w, CK_R_COPY);\n'
        '    xfer_shard_copy_end(w->sh[m.shard], w->env.now, m.tr + 1u,\n'
        '                        m.resv_id, true);\n'
        '    reply(w, &m, 0, NULL);\n'
        '    m.flags |= MF_COPY | MF_ORPHAN;\n'),
    # Issue 13: the eager path reports success on the first shard's ack,
    # while the other shards' eager ops are still unanswered (they may
    # never apply it).
    'eager_early_success': (
        'transfer.c',
        '        s->eager = XFER_SUB_OK;\n'
        '        s->resv_id = r->resv_id;\n',
        '        s->eager = XFER_SUB_OK;\n'
        '        s->resv_id = r->resv_id;\n'
        '        if (t->pending == t->nshards) {\n'
        '            t->pending = 1;\n'
        '            for (uint16_t j = 0; j < t->nshards; j++)\n'
        '                t->shards[j].eager = XFER_SUB_OK;\n'
        '        }\n'),
    # Issue 30: the eager bound is off by one, so a slice of exactly
    # eager_max_bytes (every slice of the checker's world) never takes the
    # eager path.  Every invariant holds on the plain path: the --eager
    # runs passed with such a bug until each mode had to reach its feature
    # (reach.h); now they exit 3.
    'eager_never': (
        'transfer.c',
        '        if (t->shards[k].len > max)\n',
        '        if (t->shards[k].len >= max)\n'),
    # The end of a shutdown skips unregistering the pools: the callback is
    # called with every pool still registered.  fsm/life.c is the registry
    # of the real engine and of the checker's engine model alike (issue 14).
    'engine_keeps_pools': (
        'life.c',
        '        if (xfer_life_pool_remove(pools, n, p) == 0) {\n',
        '        if (0 && xfer_life_pool_remove(pools, n, p) == 0) {\n'),
    # An accepted submit does not hold its pool, so the pool could go while
    # the transfer still writes from it (tools/mutate found that the model
    # alone missed this one: I9 now compares the registry with the regions).
    # The registry lets the pools go but never says so: the engine's
    # transports keep them (tools/mutate: the checker missed it until I9
    # required the unregistration to reach the driver).
    'registry_silent_unregister': (
        'life.c',
        '        if (xfer_life_pool_remove(pools, n, p) == 0) {\n',
        '        if (!(xfer_life_pool_remove(pools, n, p) == 0)) {\n'),
    # The registry reports the end of a shutdown on every call after it
    # (tools/mutate: the checker asked it once; it now asks after every
    # drain, as the engine does after every deferred event).
    'registry_reports_again': (
        'life.c',
        '    l->reported = 1;\n',
        ''),
    # Issue 27: the shard's integrity verdict never refuses: a region a
    # write corrupted is committed READY (caught by INTEG, --corrupt).
    'check_skipped': (
        'shard_check.c',
        '    if (expected == got)\n',
        '    if (1 || expected == got)\n'),
    # Issue 26 (--parts): a part's staging comes back once its last run
    # was sent, while that write is still in flight (I3 per part).
    'part_release_early': (
        'transfer.c',
        '        if (!p->released && p->inflight == 0 && (stopped || p->unsent == 0))\n',
        '        if (!p->released && (stopped || p->unsent == 0))\n'),
    # Issue 26: a sealed stream commits without waiting for its parts'
    # writes to be answered.
    'commit_before_parts': (
        'transfer.c',
        '    if (st->sealed && t->pending == 0 && !parts_left(st))\n',
        '    if (st->sealed)\n'),
    # Issue 26: a stream takes a part after it failed (the failure no
    # longer refuses it).
    'part_after_failure': (
        'transfer.c',
        '    if (failed(t))\n'
        '        return t->status;\n'
        '    return t->stopping ? XFER_ERR_STATE : 0;\n',
        '    return t->stopping ? XFER_ERR_STATE : 0;\n'),
    'registry_no_hold': (
        'life.c',
        '    pools[p].users++;\n',
        ''),
    # Issue 30 item 2 (--stale-ops): a cancel of another attempt reaching
    # a commit waiting for its invalidation is taken (the record goes
    # CANCEL_INVAL: the producer's acked commit is lost).
    'inval_cancel_any_attempt': (
        'shard.c',
        'static int h_defer_cancel_inval(xfer_shard *s, resv_step *o)\n{\n'
        '    if (mismatch(o))\n        return XFER_ERR_STALE;\n',
        'static int h_defer_cancel_inval(xfer_shard *s, resv_step *o)\n{\n'),
    # Issue 30 (--gone): the engine model sends an op to a shard whose
    # directory entry is gone, as if it still used the stale entry.
    'gone_stale_entry': (
        'engine.c',
        '    if (ck_gone_refuse(w, &m))\n        return;\n',
        ''),
    # The transport closes a gone shard's connection but never fails the
    # ops it had sent there: they wait for the deadline.
    'gone_sent_unfailed': (
        'gone.c',
        '            m->flags = (uint8_t)((m->flags & ~MF_ABORT) | MF_ORPHAN);\n'
        '            fail_gone(w, &op);\n',
        '            m->flags = (uint8_t)((m->flags & ~MF_ABORT) | MF_ORPHAN);\n'
        '            (void)op;\n'),
    # A new op for a gone shard is refused but its failure never reported:
    # the transfer hangs until its deadline.
    'gone_new_op_dropped': (
        'gone.c',
        '    fail_gone(w, m);\n    return true;\n',
        '    return true;\n'),
    # Issue 30 item 2 (--refresh): the lease check of h_refresh negated,
    # so every refresh of a live reservation is refused STATE.
    'refresh_refused_live': (
        'shard.c',
        '    if (!xfer_heap_contains(&s->leases, o->slot))\n'
        '        return XFER_ERR_STATE;',
        '    if (xfer_heap_contains(&s->leases, o->slot))\n'
        '        return XFER_ERR_STATE;'),
    # A granted refresh is not counted (xfer_shard_stats.refreshes).
    'refresh_uncounted': (
        'shard.c',
        '    s->st.refreshes++;\n',
        ''),
}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in MUTANTS:
        sys.exit('usage: mutate.py {%s} SRC OUT' % ','.join(MUTANTS))
    name, src, out = sys.argv[1:]
    base, old, new = MUTANTS[name]
    if not src.endswith(base):
        sys.exit('mutate.py: %s patches %s, not %s' % (name, base, src))
    text = open(src).read()
    if text.count(old) != 1:
        sys.exit('mutate.py: %s: the snippet to patch occurs %d times in %s'
                 % (name, text.count(old), src))
    with open(out, 'w') as f:
        f.write('/* MUTANT %s: a deliberately broken copy of %s, for the '
                'xfer-check mutant tests only. */\n' % (name, base))
        f.write(text.replace(old, new))


main()
