"""xfer.xferd - run a consumer group of local xferd shard processes, for
tests, examples and benchmarks.

    with xfer.xferd.Group(4) as g:                 # 4 processes, shard k each
        engine = xfer.Engine(xfer.Tcp(g.addrs))

Each process serves one shard on an ephemeral loopback port (written to a
port file, which is how its port is learnt), and dies with its parent
(PR_SET_PDEATHSIG), so none outlives a test that crashed.  The xferd
binary is the `xferd` argument, else $XFERD, else `xferd` on PATH.
"""
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time

__all__ = ["Group", "find"]


def find(path=None):
    """The xferd executable to run, or FileNotFoundError."""
    for p in (path, os.environ.get("XFERD"), shutil.which("xferd")):
        if p and os.access(p, os.X_OK):
            return p
    raise FileNotFoundError("no xferd: pass its path or set $XFERD")


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Group:
    """nshards xferd processes on 127.0.0.1, shard k at addrs[k].

    consume=True passes --consume (the daemon takes and releases every
    committed transfer at once, as a consumer would); shm=NAME passes
    --shm NAME (shard k's pool is the shared-memory object /NAME.k, which
    xfer.Consumer(shm=NAME) maps) and implies consume=False; args are more
    xferd flags for every process (e.g. ["--faults", "20000:7"])."""

    def __init__(self, nshards, *, xferd=None, pool="64M", lease_ttl="10s",
                 consume=True, shm=None, args=(), timeout=10.0):
        self.exe = find(xferd)
        self.procs, self.addrs = [], []
        self.shm = shm
        self._dir = tempfile.mkdtemp(prefix="xfer-xferd-")
        self._opts = (pool, lease_ttl, consume and not shm, list(args))
        try:
            for k in range(nshards):
                self._start(k)
            self._wait_ports(timeout)
        except BaseException:
            self.stop(signal.SIGKILL)
            raise

    def _start(self, k, port=0):
        pool, lease_ttl, consume, args = self._opts
        cmd = [self.exe, "--shards", str(k), "--port", str(port),
               "--port-file", os.path.join(self._dir, "%d.port" % k),
               "--pool", pool,
               "--lease-ttl", lease_ttl, "--quiet"]
        if consume:
            cmd.append("--consume")
        if self.shm:
            cmd += ["--shm", self.shm]
        cmd += args
        log = open(os.path.join(self._dir, "%d.log" % k), "ab")
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=log, preexec_fn=_die_with_parent)
        log.close()
        if k < len(self.procs):
            self.procs[k] = p
        else:
            self.procs.append(p)

    def _wait_ports(self, timeout):
        end = time.monotonic() + timeout
        for k, p in enumerate(self.procs):
            pf = os.path.join(self._dir, "%d.port" % k)
            while not os.path.exists(pf):
                if p.poll() is not None:
                    raise RuntimeError("xferd for shard %d exited (%s): %s" %
                                       (k, p.returncode, self.log(k)))
                if time.monotonic() > end:
                    raise RuntimeError("xferd for shard %d did not listen "
                                       "within %.0fs" % (k, timeout))
                time.sleep(0.005)
            with open(pf) as f:
                self.addrs.append("127.0.0.1:%d" % int(f.read()))

    def log(self, k):
        """What shard k's process wrote on stdout and stderr."""
        try:
            with open(os.path.join(self._dir, "%d.log" % k)) as f:
                return f.read()
        except OSError:
            return ""

    def kill(self, k, sig=signal.SIGKILL):
        """Send sig to shard k's process and reap it."""
        p = self.procs[k]
        if p.poll() is None:
            p.send_signal(sig)
        p.wait()

    def restart(self, k, timeout=10.0):
        """Kill shard k's process (SIGKILL) and start it again on the same
        port (with --shm, over a new shared-memory object)."""
        self.kill(k)
        port = int(self.addrs[k].rsplit(":", 1)[1])
        pf = os.path.join(self._dir, "%d.port" % k)
        os.unlink(pf)
        self._start(k, port)
        end = time.monotonic() + timeout
        while not os.path.exists(pf):
            if self.procs[k].poll() is not None or time.monotonic() > end:
                raise RuntimeError("xferd for shard %d did not come back: %s"
                                   % (k, self.log(k)))
            time.sleep(0.005)

    def stop(self, sig=signal.SIGTERM, timeout=5.0):
        """End every process (sig, then SIGKILL after timeout) and remove
        the port files.  Returns the exit statuses."""
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(sig)
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout))
            except subprocess.TimeoutExpired:
                p.kill()
                codes.append(p.wait())
        shutil.rmtree(self._dir, ignore_errors=True)
        return codes

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
