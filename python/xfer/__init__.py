"""xfer - the Python binding of the xfer engine: the producer side.

    import asyncio, xfer

    async def main():
        async with xfer.Engine(xfer.Loop(4)) as engine:
            staging = bytearray(4 * 4096)
            pool = engine.register_pool(staging)       # no copy
            result = await engine.submit(1, pool, xfer.split(0, len(staging), 4))
            print(result)                              # <xfer.Result id=1 ... ok>

    asyncio.run(main())

The engine's libevent loop runs on a thread the Engine owns; every call
from Python goes through the engine's thread-safe mailbox, and no call
holds the GIL while it waits.  Completions come back to the asyncio loop
that awaited them (an eventfd that loop watches), to a thread blocked in
submit_wait(), or to the engine's callback thread (submit_callback()).

Outcomes: an awaited transfer resolves to an xfer.Result when it succeeds
and raises the xfer.Error subclass of its status when it fails; the
exception's .result is the full Result (phase, shards, flags).  A submit
the engine refuses at once raises from submit() itself and never
completes.  Transfer.cancel() cancels the transfer in the engine and the
awaitable still resolves with the engine's one outcome (I1), so a task
cancelled while awaiting a transfer resumes only once that transfer has
ended and no write reads its staging memory.

The consumer side: xfer.Server(buffers) serves a tensor-parallel
worker's own memory (each buffer one shard's pool: the producer's bytes
land in it); xfer.Consumer(addrs, shm=NAME or buffers=...) is the consumer
scheduler's client, an async iterator of outcomes (and get(), blocking):

    async with xfer.Consumer(addrs, shm="kv") as consumer:
        consumer.expect(7, timeout=10)      # an outcome even if none comes
        async for outcome in consumer:
            if outcome.ok:                  # xfer.Available
                with outcome:               # released at the end
                    use(outcome.views)      # one memoryview per shard
            else:                           # xfer.Unavailable
                print(outcome.id, outcome.name, outcome.shards)

Each id gets exactly one outcome.  An Available's views show the data in
place (no copy) until it is released; after that using them raises, and
the data goes back to the shards once no view derived from them is left.

The C half is xfer._xfer.
"""
import asyncio
import atexit
import builtins
import weakref
from typing import NamedTuple, Optional

from . import _xfer
from ._xfer import (MAX_SHARDS, PHASE_CANCELLING, PHASE_COMPLETING,
                    PHASE_NONE, PHASE_RESERVING, PHASE_SUBMIT, PHASE_WRITING,
                    Available, Pool, Result, Unavailable)
# Memory handed over in place (python/ext/tensor.c): DeviceView is what a
# device pool's region comes back as (__cuda_array_interface__ v3, valid
# until released); the underscored names are test and diagnostic helpers:
# _memory(obj) says what would be registered for obj, _mem_of(pointer)
# what kind of memory the library sees there, _testdev_alloc(n) test-device
# memory (tests only).
from ._xfer import (DeviceView, HAVE_TESTDEV as _HAVE_TESTDEV,  # noqa: F401
                    _device_view, _mem_available, _mem_of, _memory,
                    _testdev_alloc)

__all__ = ["Engine", "Loop", "Tcp", "Pool", "Result", "Transfer", "Stream",
           "Fault",
           "Server", "Consumer", "Available", "Unavailable",
           "Error", "split", "strerror", "MAX_SHARDS", "PHASE_NONE",
           "PHASE_RESERVING", "PHASE_WRITING", "PHASE_COMPLETING",
           "PHASE_CANCELLING", "PHASE_SUBMIT", "DeviceView"]


# --------------------------------------------------------------------------
# Errors: one class per code of include/xfer/errors.h
# --------------------------------------------------------------------------

class Error(Exception):
    """An xfer error.  .code is the (negative) xfer error code, .name its
    enum name ("BUSY"), .result the Result of a transfer that failed (None
    for a call refused at once), .phase that result's phase (or None)."""

    code = None

    def __init__(self, what, message=None):
        if isinstance(what, Result):
            self.result, code = what, what.status
        else:
            self.result, code = None, int(what)
        self.code = code
        self.name = _xfer.err_name(code)
        self.phase = self.result.phase if self.result is not None else None
        text = message or _xfer.strerror(code)
        r = self.result
        if r is not None:
            text = "transfer %d: %s in %s" % (r.id, text, r.phase_name)
            if r.shards:
                text += ", shards %s" % ",".join(map(str, r.shards))
            if r.consumer_may_hold:
                text += " (the consumer may hold the data)"
        super().__init__(text)


# Codes that also read as a builtin exception.  xfer.CancelledError is not
# asyncio's: it is a transfer that was cancelled (or an id tombstoned).
_ALSO = {"INVALID_ARG": ValueError, "NOMEM": MemoryError,
         "TIMEOUT": builtins.TimeoutError, "CONN_LOST": ConnectionError,
         "NOT_FOUND": LookupError, "NO_POOL": LookupError}
# Causes that refine an older code (docs/design.md, statuses and their
# causes): `except xfer.CancelledError` still catches every cancel, and
# `except xfer.ShutdownError` every transfer the shutdown ended.
_REFINES = {"PEER_CANCELLED": "CANCELLED", "REUSED": "CANCELLED",
            "SHARD_GONE": "CONN_LOST",
            "ABANDONED": "SHUTDOWN"}
_by_name = {}

errors = {}
"""code -> the Error subclass raised for it."""


def _class_name(name):
    return "".join(w.capitalize() for w in name.split("_")) + "Error"


for _code, _name, _msg in _xfer.error_codes():
    _bases = ((_by_name[_REFINES[_name]],) if _name in _REFINES
              else (Error,)) + ((_ALSO[_name],) if _name in _ALSO else ())
    _cls = type(_class_name(_name), _bases,
                {"code": _code, "__doc__": _msg + ".", "__module__": __name__})
    globals()[_cls.__name__] = _cls
    errors[_code] = _cls
    _by_name[_name] = _cls
    __all__.append(_cls.__name__)
del _code, _name, _msg, _bases, _cls, _by_name


def strerror(code):
    """The message of an xfer error code."""
    return _xfer.strerror(code)


# --------------------------------------------------------------------------
# The awaitable of a submit
# --------------------------------------------------------------------------

class Transfer(asyncio.Future):
    """What Engine.submit returns: an asyncio future of the running loop,
    resolved exactly once with the engine's outcome.  .id is the transfer
    id."""

    __slots__ = ("id", "_engine")

    def cancel(self, msg=None):
        """Cancel the transfer in the engine (idempotent).  The future is
        not cancelled: it resolves with the engine's outcome once every
        shard has answered (usually xfer.CancelledError, or the Result if
        every commit was already acknowledged).  Returns False, as for a
        future that cannot be cancelled, so a task awaiting this one is
        cancelled only once the transfer has ended."""
        if not self.done():
            try:
                self._engine.cancel(self.id)
            except Error:
                pass  # the engine stopped: the outcome is on its way
        return False

    def __repr__(self):
        state = "pending" if not self.done() else "done"
        return "<xfer.Transfer id=%s %s>" % (getattr(self, "id", "?"),
                                             state)


_xfer._setup(Transfer, Error, errors)


# --------------------------------------------------------------------------
# Transports
# --------------------------------------------------------------------------

_KINDS = {"fail": _xfer.FAULT_FAIL, "applied_lost": _xfer.FAULT_APPLIED_LOST,
          "drop": _xfer.FAULT_DROP, "delay": _xfer.FAULT_DELAY}
_OPS = {None: _xfer.OP_ANY, "any": _xfer.OP_ANY,
        "reserve": _xfer.OP_RESERVE, "write": _xfer.OP_WRITE,
        "commit": _xfer.OP_COMMIT, "cancel": _xfer.OP_CANCEL,
        "eager": _xfer.OP_EAGER}


class Fault(NamedTuple):
    """A fault rule (see xfer/fault.h) of the loop transport (Loop) and of
    the shard server (Server, xferd --fault): the same rules, matched by
    the same code, in process and over TCP.

    kind: "fail" (refused, not applied), "applied_lost" (applied, the reply
    says failed), "drop" (never answered until aborted), "delay".
    op: "reserve", "write", "commit", "cancel", "eager" or None (any).
    shard: an index or None (any); id: a transfer id or 0 (any).
    prob: the chance per op, 0 < prob <= 1, or 0 for always.
    count: fire at most this many times (0: no limit).
    delay: seconds (delay rules).  error: the status of a failure, an
    error code or an Error subclass (None: RemoteError)."""

    kind: str
    op: Optional[str] = None
    shard: Optional[int] = None
    id: int = 0
    prob: float = 0.0
    count: int = 0
    delay: float = 0.0
    error: object = None

    @classmethod
    def parse(cls, text):
        """A Fault from xferd --fault's text form, e.g.
        "op=write,shard=2,action=fail" or
        "op=commit,shard=1,action=delay,ms=200" (keys: action, op, shard,
        id, count, ppm, ms, error).  ValueError when it is malformed."""
        kind, op, shard, id_, ppm, count, delay_ns, error = \
            _xfer.fault_parse(text)
        return cls(kind=_KIND_NAMES[kind],
                   op=None if op < 0 else _OP_NAMES[op],
                   shard=None if shard < 0 else shard, id=id_,
                   prob=ppm / 1e6, count=count, delay=delay_ns / 1e9,
                   error=error or None)


_KIND_NAMES = {v: k for k, v in _KINDS.items()}
_OP_NAMES = {v: k for k, v in _OPS.items() if k not in (None, "any")}


def _error_code(error):
    if error is None:
        return 0
    if isinstance(error, type) and issubclass(error, Error):
        return error.code
    return int(error)


def _rule_args(fault, kw):
    """add_fault's (kind, keywords) for the C side: fault is a Fault, its
    text form, or a kind with Fault's keywords."""
    if isinstance(fault, str) and "=" in fault:
        fault = Fault.parse(fault)
    if not isinstance(fault, Fault):
        fault = Fault(fault, **kw)
    elif kw:
        fault = fault._replace(**kw)
    try:
        kind, op = _KINDS[fault.kind], _OPS[fault.op]
    except KeyError as e:
        raise ValueError("unknown fault kind or op %s" % e) from None
    return kind, dict(op=op, shard=-1 if fault.shard is None else fault.shard,
                      id=fault.id, prob=float(fault.prob), count=fault.count,
                      delay=fault.delay, error=_error_code(fault.error))


class Loop(_xfer.Loop):
    """nshards in-process shards on the engine's loop, with seeded fault
    rules: the test workhorse.  The shards' consumer takes every ready
    transfer and releases it at once (consume=True), recording what it
    received (received(id): per shard (length, zlib.crc32 of the data)).
    stats() gives the transport's counters, stats(shard) shard k's own."""

    def __init__(self, nshards, *, pool_bytes=16 << 20, max_reservations=0,
                 lease_ttl=None, seed=0, write_time=None, consume=True,
                 faults=()):
        super().__init__(nshards, pool_bytes=pool_bytes,
                         max_reservations=max_reservations,
                         lease_ttl=lease_ttl, seed=seed,
                         write_time=write_time, consume=consume)
        for f in faults:
            self.add_fault(f)

    def add_fault(self, fault, **kw):
        """Append a rule: a Fault, its text form ("op=write,shard=2,
        action=fail"), or a kind and Fault's keywords."""
        kind, args = _rule_args(fault, kw)
        super().add_fault(kind, **args)


def _check_addrs(addrs, who):
    """addrs as a list of "ip:port" strings, each checked here so a bad
    entry is refused at construction, naming the entry and why (the
    library would only say "invalid argument", and later).  The address
    must be numeric (IPv4, or IPv6 in brackets: "[::1]:7470"): host names
    are refused, not resolved, until the library itself resolves them
    (a name resolved once here would go stale when its host moves)."""
    import ipaddress

    def bad(text):  # a ValueError that is also xfer's INVALID_ARG
        cls = InvalidArgError  # noqa: F821 (made from the error list)
        return cls(cls.code, "%s: %s" % (who, text))
    if isinstance(addrs, str):
        addrs = [a.strip() for a in addrs.split(",") if a.strip()]
    try:
        addrs = list(addrs)
    except TypeError:
        raise TypeError("%s: addrs must be a list of \"ip:port\" strings or "
                        "one \"a,b,c\" string, not %s"
                        % (who, type(addrs).__name__)) from None
    if not addrs:
        raise bad("no shard address given")
    if len(addrs) > MAX_SHARDS:
        raise bad("%d addresses, at most %d shards"
                  % (len(addrs), MAX_SHARDS))
    for k, a in enumerate(addrs):
        if not isinstance(a, str):
            raise TypeError("%s: addrs[%d] is %s, not an \"ip:port\" string"
                            % (who, k, type(a).__name__))
        host, sep, port = a.rpartition(":")
        if not sep or (host.count(":") and not host.startswith("[")):
            raise bad("addrs[%d] %r has no port (\"ip:port\", "
                      "\"[ipv6]:port\")" % (k, a))
        if not port.isdigit() or not 0 < int(port) < 65536:
            raise bad("addrs[%d] %r: port %r is not 1..65535"
                      % (k, a, port))
        bracketed = host.startswith("[") and host.endswith("]")
        ip = host[1:-1] if bracketed else host
        try:
            parsed = ipaddress.ip_address(ip)
        except ValueError:
            parsed = None
        if parsed is None or (bracketed and parsed.version != 6):
            raise bad("addrs[%d] %r: %r is not a numeric IPv4 or IPv6 "
                      "address (host names are not supported yet: give "
                      "the address, e.g. 127.0.0.1:%s)" % (k, a, host, port))
    return addrs


class Tcp(_xfer.Tcp):
    """Shards served by xferd over TCP: addrs[k] ("ip:port", numeric) serves
    shard k; a "ip:port,ip:port" string works too.  Every entry is checked
    here: one without a port, with a port outside 1..65535 or with a host
    name raises ValueError naming the entry and why.  group is the group
    number sent in HELLO (xferd --group).  secret (bytes, 16..256) answers
    the shards' challenge (xferd --secret-file); session (16 bytes, default
    drawn at random) names this producer to the shards, the same across
    reconnects, so the reservations it made stay its own."""

    def __init__(self, addrs, *, group=0, connect_timeout=None, secret=None,
                 session=None):
        addrs = _check_addrs(addrs, "Tcp")
        super().__init__(addrs, group=group,
                         connect_timeout=connect_timeout, secret=secret,
                         session=session)

    def wait_connected(self, timeout=5.0):
        """Block (a few ms per poll) until every shard connection is up.
        Returns True when it is, False after timeout seconds."""
        import time
        end = time.monotonic() + timeout
        while not self.connected():
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True


# --------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------

_NOTIFY = {"fd": _xfer.NOTIFY_FD, "call_soon": _xfer.NOTIFY_CALL_SOON}
_live = weakref.WeakSet()


class _Closing:
    """What Engine, Server and Consumer share: `with` closes with the
    blocking close, `async with` and aclose() without blocking the running
    loop (the C side's _begin_aclose gives a future resolved once its loop
    stopped; then _finish_close frees what the loop used)."""

    _aclose_when_closed = False

    async def aclose(self):
        """Close without blocking the running loop: every transfer ends,
        every completion or outcome is delivered, every buffer let go."""
        if self._aclose_when_closed or not self.closed:
            await self._begin_aclose()
            self._finish_close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.aclose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._close_blocking()


class Engine(_Closing, _xfer.Engine):
    """The producer engine over one consumer group (transport: Loop or
    Tcp); more groups with add_group().  Keywords (0 or None: the
    library's default): max_transfers, max_tombstones, max_pools,
    mailbox_cap, default_timeout, tombstone_ttl, cancel_op_timeout,
    cancel_backoff (seconds), shutdown_timeout (seconds shutdown() may
    take before what is still rolling back is abandoned to the shards'
    leases, each such transfer ending with AbandonedError; default 10,
    math.inf: none), cancel_max_attempts, eager_max_bytes (a
    block of at most this many bytes goes as one EAGER op per shard where
    the group allows it: reserve, data and commit in one round; 0, the
    default, is off), and notify: "fd" (an
    eventfd the asyncio loop watches; the default) or "call_soon" (the
    loop thread calls call_soon_threadsafe).

    view(id): a live transfer as the engine sees it (None once it ended):
    its state, attempt, ops in flight ("pending") and, per shard, the
    sub-state of its reserve, write, commit, cancel and eager ops
    ("NONE", "PENDING", "OK"/"DONE"/"ACKED"/"APPLIED", "FAILED",
    "GAVE_UP") and the cancels sent ("cancel_attempts")."""

    def __init__(self, transport, *, notify="fd", **kw):
        super().__init__(transport, notify=_NOTIFY[notify], **kw)
        _live.add(self)

    def close(self):
        """shutdown() under the name Server and Consumer use: end every
        transfer, deliver every completion, let go of every pool; blocks
        without the GIL.  `with xfer.Engine(...) as e:` calls it at the end
        of the block, `async with` awaits aclose() instead."""
        self.shutdown()

    def _close_blocking(self):
        self.shutdown()

    def stream(self, id, lens, *, group=0, timeout=None):
        """A streamed transfer (docs/streaming.md), as an async context
        manager: entering opens it (the reserves go out to every shard at
        once, lens[k] bytes on shard k), the body writes parts with
        Stream.write(), and a normal exit seals it and awaits its one
        outcome (the Result, or the Error of its status raised).  An
        exception in the body cancels the stream, waits until it ended
        (no write reads staging any more) and propagates."""
        return Stream(self, id, lens, group, timeout)

    def __repr__(self):
        return "<xfer.Engine %s, %d group(s)>" % (
            "closed" if self.closed else "running", len(self.transports))


_STATE_CODE = -17  # XFER_ERR_STATE (include/xfer/errors.h)


class Stream:
    """What Engine.stream returns; see there.  .id is the transfer id,
    .transfer its Transfer future once entered.  .crcs (None): set it in
    the body to the CRC32C of each shard's whole reservation when the
    producer has them (docs/integrity.md); the seal then carries them
    instead of the CRCs computed as the parts went, and a wrong one fails
    the stream CorruptError."""

    def __init__(self, engine, id, lens, group, timeout):
        self.id = id
        self._engine = engine
        self._lens = list(lens)
        self._group = group
        self._timeout_ns = 0 if timeout is None else int(timeout * 1e9)
        self.transfer = None
        self.crcs = None

    async def __aenter__(self):
        self.transfer = self._engine._stream_open(
            self.id, self._lens, self._group, self._timeout_ns)
        return self

    def write(self, pool, ranges):
        """Add a part: ranges of (shard, offset, length, resv_offset), each
        `length` bytes of `pool` at `offset` going to that shard's
        reservation at `resv_offset` (a layer, or paged blocks gathered
        into one).  The pool must stay registered until the stream ended
        (the engine refuses to unregister it before).  A part the engine
        refuses (the stream failed, was cancelled, or a bound was passed)
        fails the stream: its outcome says why; a part after the stream
        ended raises that outcome's error (StateError once it succeeded).

        Returns an asyncio Future of the running loop that resolves when
        the part's staging is the producer's again (none of its writes in
        flight, none to be sent): its result is the part number (1, 2, ...
        in the order written); a part released with a failure (the stream
        failed, was cancelled, or refused the part) holds the Error of
        that status instead, which awaiting it raises.  Such a future is
        marked retrieved: a producer that never awaits its parts gets no
        "exception was never retrieved" warning (the stream's outcome
        carries the failure).  Every part's future is done before the
        stream's transfer is."""
        t = self.transfer
        if t is None:
            raise errors[_STATE_CODE](_STATE_CODE,
                                          "the stream is not open")
        if t.done():
            exc = t.exception()
            if exc is not None:
                raise exc
            raise errors[_STATE_CODE](_STATE_CODE,
                                          "the stream has ended")
        return self._engine._stream_part(self.id, pool, list(ranges))

    async def __aexit__(self, et, ev, tb):
        if et is None:
            self._engine._stream_seal(self.id, self.crcs)
            await self.transfer  # the Result, or raises its Error
            return False
        self.transfer.cancel()  # the engine's cancel; resolves once ended
        try:
            await asyncio.shield(self.transfer)
        except Error:
            pass  # the cancel's own outcome; the body's exception wins
        return False

    def __repr__(self):
        return "<xfer.Stream id=%s>" % self.id


@atexit.register
def _shutdown_live_engines():
    """No loop thread (an engine's, a server's, a consumer's) may outlive
    the interpreter."""
    for e in list(_live):
        e.shutdown() if isinstance(e, Engine) else e.close()
    _xfer._reap(True)   # Engines dropped while their loop still ran


# --------------------------------------------------------------------------
# The consumer side
# --------------------------------------------------------------------------

class Server(_Closing, _xfer.Server):
    """A shard server over this process's own memory, on a loop thread of
    its own: buffers[i] (any writable, C-contiguous buffer: bytearray,
    mmap, numpy array, a tensor's buffer) is the pool of shard shards[i]
    (default: shard i), served over TCP on addr:port (default 127.0.0.1
    and a free port: .port).  The producer's bytes land in the buffers,
    no copy; each buffer is held until the server is closed (every
    connection is gone then), and must not be written by this process
    meanwhile.

    Keywords (0 or None: the library's default): addr, port, group,
    max_reservations, max_tombstones, lease_ttl, tombstone_ttl, take_grace
    (how long the data a consumer took stays taken after its connection
    closed), drain_timeout (seconds); consume=True (a sink: take and
    release every ready transfer at once); fault_ppm, drop_ppm, fault_seed
    (tests: faults on the producer's ops); secret (bytes, 16..256: every
    peer must answer HELLO2's challenge with it), insecure=True (bind an
    address other than loopback without a secret).

    etcd="http://host:port,..." registers every shard in etcd
    (docs/discovery.md) as a member of group etcd_group (a name, default
    "0"; the HELLO group is then its number unless group is given), under
    a lease of etcd_ttl seconds (10), at advertise (default: addr), so
    producers created from the group name find it; drain() leaves the
    group before it stops accepting, close() without drain() leaves the
    entries to their lease.

    faults=[...] (and add_fault(), clear_faults()): fault rules on the
    producers' ops, as Loop's (xfer.Fault, or its text form
    "op=write,shard=2,action=fail"; shard is the index in the group).  A
    rule's fate is a real shard's: "fail" answers the error the producer
    rolls back on, "applied_lost" applies and answers an error, "drop"
    never answers, "delay" holds the op on the server's loop (which runs
    on) and applies it later; a delayed write's data lands at once and its
    end is held.  stats(shard) counts rules_fired, ops_delayed and
    delayed_now.

    stats(shard=None), drain() / await adrain() (stop taking new
    transfers, wait until nothing is being written: True, or False after
    drain_timeout), close() / await aclose()."""

    def __init__(self, buffers, *, faults=(), **kw):
        super().__init__(buffers, **kw)
        _live.add(self)
        for f in faults:
            self.add_fault(f)

    def add_fault(self, fault, **kw):
        """Append a rule: a Fault, its text form, or a kind and Fault's
        keywords.  It applies from the next op a producer sends."""
        kind, args = _rule_args(fault, kw)
        super().add_fault(kind, **args)

    @property
    def addrs(self):
        """One "127.0.0.1:port" per hosted shard, for xfer.Tcp."""
        return ["127.0.0.1:%d" % self.port] * len(self.shards)

    async def adrain(self):
        """drain() without blocking the running loop."""
        return await self._begin_drain()

    def _close_blocking(self):
        self.close()

    def __repr__(self):
        return "<xfer.Server port %d, shards %s%s>" % (
            self.port, ",".join(map(str, self.shards)),
            ", closed" if self.closed else "")


class Consumer(_Closing, _xfer.Consumer):
    """The consumer scheduler's client: connects to the shard servers of a
    group (addrs[k] serves shard k: "ip:port", or one "a,b,c,d" string),
    and reports every id exactly once, as an xfer.Available (every shard's
    data is in place, pinned until released) or an xfer.Unavailable (the
    reason, and the shards that never reported).

    Where the data is read: shm=NAME maps the shared-memory pools of
    `xferd --shm NAME` (again whenever a shard restarts); buffers=[...]
    (one per shard, or an xfer.Server of this process) reads the memory a
    Server serves; with neither, an Available has regions but no views.

    Outcomes: `async for outcome in consumer` (iterate from one asyncio
    loop at a time; it ends once the consumer is closed), or get(timeout)
    (blocking, without the GIL).  expect(id, timeout) gives an id an
    outcome even if no shard ever reports it; cancel(id) aborts it on
    every shard (the producer's commit fails).  Keywords (0 or None: the
    library's default): group, max_ids, max_tombstones, mailbox_cap,
    ready_deadline, tombstone_ttl, connect_timeout, reconnect_min,
    reconnect_max, request_timeout (seconds: a shard that leaves a request
    unanswered this long is taken down as lost); secret (bytes, 16..256) and session (16
    bytes, default drawn at random) as for xfer.Tcp.

    cancel_shards(id) -> (acked, refused) says which shards acknowledged
    the consumer's cancel of id (a cancel made while a shard's link is
    down reaches it when the link is back).

    close(timeout=5.0) gives back the data of every outcome still held or
    queued (their views are released), waits until every shard answered
    every cancel and release accepted (at most timeout seconds), then
    closes the connections; it returns the shards that did not answer in
    time ([] when everything was delivered).  await aclose() does the same
    without waiting for the shards' answers."""

    def __init__(self, addrs, *, shm=None, buffers=None, **kw):
        addrs = _check_addrs(addrs, "Consumer")
        if isinstance(buffers, _xfer.Server):
            by_shard = dict(zip(buffers.shards, buffers.buffers))
            buffers = [by_shard.get(k) for k in range(len(addrs))]
        super().__init__(addrs, shm=shm, buffers=buffers, **kw)
        self._loop = None
        self._waiters = []
        _live.add(self)

    def wait_connected(self, timeout=5.0):
        """Block (a few ms per poll) until every shard's link is up.
        Returns True when it is, False after timeout seconds."""
        import time
        end = time.monotonic() + timeout
        while not self.connected():
            if time.monotonic() > end:
                return False
            time.sleep(0.005)
        return True

    async def wait_up(self, timeout=5.0):
        """wait_connected() without blocking the running loop."""
        end = asyncio.get_running_loop().time() + timeout
        while not self.connected():
            if asyncio.get_running_loop().time() > end:
                return False
            await asyncio.sleep(0.005)
        return True

    def __aiter__(self):
        return self

    async def __anext__(self):
        while True:
            outcome = self._pop()
            if outcome is not None:
                return outcome
            if self.closed:
                raise StopAsyncIteration
            await self._readable()

    def _readable(self):
        """A future of the running loop, resolved when the outcome queue's
        eventfd fires (an outcome was queued, or the consumer closed)."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._unwatch()
            loop.add_reader(self.fileno(), self._on_readable)
            self._loop = loop
        fut = loop.create_future()
        self._waiters.append(fut)
        return fut

    def _on_readable(self):
        self._ack()
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)
        if self.closed:
            self._unwatch()

    def _unwatch(self):
        loop, self._loop = self._loop, None
        if loop is None or loop.is_closed():
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop or not loop.is_running():
            loop.remove_reader(self.fileno())
        else:   # the callback holds self, so the fd stays open until then
            loop.call_soon_threadsafe(loop.remove_reader, self.fileno())

    # Either close wakes the iterating task through the eventfd, and its
    # iteration ends; a second close is harmless, so aclose always runs.
    _aclose_when_closed = True

    def _close_blocking(self):
        self.close()

    def __repr__(self):
        return "<xfer.Consumer %d shards%s%s>" % (
            self.nshards, ", shm %s" % self.shm if self.shm else "",
            ", closed" if self.closed else "")


def split(offset, length, nshards):
    """One (offset, length) slice per shard: length bytes from offset cut
    into nshards equal parts (the last takes what does not divide)."""
    if nshards < 1 or length < 0:
        raise ValueError("nshards >= 1 and length >= 0")
    part = length // nshards
    return [(offset + k * part,
             part if k < nshards - 1 else length - part * (nshards - 1))
            for k in range(nshards)]
