#!/usr/bin/env python3
"""Side by side with client-go on the real control plane (issue 46).

    python3 benches/client-go.py [--window S]
    python3 benches/client-go.py --scale 1,10,100 [--client-go-per-process K] [--window S]
    python3 benches/client-go.py --leases 1000 [--window S]
    python3 benches/client-go.py --self-test

Starts its own control plane (.ci/control-plane up in a temporary folder,
down at the end), builds lease-elect (release, --features cli) and the
client-go peer (bench/client-go, through .ci/control-plane build), and
prints one Markdown table: ours (lease-elect, watching, --release-on-cancel)
and client-go's (tools/leaderelection, LeaseLock, ReleaseOnCancel) at
4/3/1 s and 15/10/2 s, each row with the ratio ours / client-go.

- graceful handover: the leader gets SIGTERM; from its COMMAND's exit to the
  follower's COMMAND's start (median of 3; negative: the two ran together);
- crash failover: the leader is SIGKILLed; from its last renew (the Lease's
  renewTime) to the follower's COMMAND's start, in lease durations;
- foreign takeover seen: kubectl writes another holder (renewTime now); from
  that write until the leader says STOPPED (its COMMAND signalled);
- requests/min per candidate, leader and follower, from the audit log (the
  leader runs as `admin`, the follower as `elector`, in a steady window);
- kube-apiserver and etcd CPU s/min per candidate: process_cpu_seconds_total
  from /metrics (etcd: /proc) over the steady window, less an idle window
  of the same length, halved (two candidates);
- the candidate's RSS (the elector's processes, COMMAND not counted) and
  its binary's size.

With --scale, N candidates (each its own process, both sides alike; with
--client-go-per-process K, client-go's N run as N/K processes of K,
`client-go-elect --candidates K`, its RSS divided by N) on one
Lease at 15/10/2 s for each N instead: requests/s at the API server (audit
log), kube-apiserver and etcd CPU s/min (less the idle plane's), Lease
watches open (apiserver_longrunning_requests), RSS per candidate, and the
graceful handover under that load (median of 3: the leader's process
SIGTERMed, with K > 1 its K candidates all stop and the next leader is in
another process); then each side's cost per candidate (from the largest
N) times 10,000. With --leases N, N Leases with one candidate each.

--scale and --leases judge every run from the server's record: the holder
timeline of each Lease from the audit log (its Lease rule is at Request
level: each stored write's holderIdentity) against the pieces of work from
the work log. Ours must have no two pieces on one Lease that ran together
and no piece begun while the Lease's last stored write named someone else
(the bench exits 1 if so); client-go's are counted as client-go's.
--self-test runs the judge on made-up timelines that it must flag.
"""

import bisect
import glob
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLANE = os.path.join(ROOT, ".ci", "control-plane")
TIMINGS = [(4, 3, 1), (15, 10, 2)]
IMPLS = ["ours", "client-go"]

# The work: a line when it starts and one when it ends, with the identity
# and Lease its elector gave it (several candidates of one client-go-elect
# process share one COMMAND line; the environment tells them apart).
MARKER = """#!/bin/bash
log=$1; who=${LEASE_ELECT_IDENTITY:-$2}; lease=${LEASE_ELECT_LEASE#*/}
trap 'echo "exit $who $EPOCHREALTIME $lease" >> "$log"; kill $! 2>/dev/null; exit 0' TERM INT
echo "start $who $EPOCHREALTIME $lease" >> "$log"
while :; do sleep 3600 & wait $!; done
"""


def sh(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


class Plane:
    def __init__(self, dir):
        self.dir = dir
        self.url = open(os.path.join(dir, "url")).read().strip()
        self.etcd = int(open(os.path.join(dir, "etcd.pid")).read())

    def kc(self, user):
        return os.path.join(self.dir, user + ".kubeconfig")

    def kubectl(self, *args):
        return sh("kubectl", "--kubeconfig", self.kc("admin"), *args)

    def metrics(self):
        pki = os.path.join(self.dir, "pki")
        return sh("curl", "-sf", "--cacert", pki + "/ca.crt", "--cert", pki + "/admin.crt",
                  "--key", pki + "/admin.key", self.url + "/metrics")

    def lease_watches(self):
        n = 0
        for line in self.metrics().splitlines():
            if line.startswith("apiserver_longrunning_requests{") and 'resource="leases"' in line \
                    and 'verb="WATCH"' in line:
                n += float(line.split()[-1])
        return n

    def apiserver_cpu(self):
        pki = os.path.join(self.dir, "pki")
        text = sh("curl", "-sf", "--cacert", pki + "/ca.crt", "--cert", pki + "/admin.crt",
                  "--key", pki + "/admin.key", self.url + "/metrics")
        for line in text.splitlines():
            if line.startswith("process_cpu_seconds_total "):
                return float(line.split()[1])
        raise RuntimeError("no process_cpu_seconds_total")

    def etcd_cpu(self):
        # The etcd process group's leader is etcd itself (setsid).
        fields = open(f"/proc/{self.etcd}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def audit(self, ns, t0, t1):
        """Requests on ns's Leases received in [t0, t1], by user."""
        seen, by = set(), {}
        for line in audit_lines(self.dir):
            e = json.loads(line)
            ref = e.get("objectRef", {})
            if ref.get("namespace") != ns or ref.get("resource") != "leases":
                continue
            if e["auditID"] in seen:
                continue
            t = parse_time(e["requestReceivedTimestamp"])
            if t0 <= t <= t1:
                seen.add(e["auditID"])
                u = e["user"]["username"]
                by[u] = by.get(u, 0) + 1
        return by


def audit_lines(plane_dir):
    """The audit log's lines in order, rotated files (audit-<time>.log)
    first, should kube-apiserver have rotated it."""
    rotated = sorted(glob.glob(os.path.join(plane_dir, "audit-*.log")))
    for path in rotated + [os.path.join(plane_dir, "audit.log")]:
        with open(path) as f:
            yield from f


def parse_time(s):
    # 2026-12-06T16:35:55.701505Z
    from datetime import datetime, timezone
    s = s.rstrip("Z")
    if "." in s:
        base, frac = s.split(".")
        s = base + "." + (frac + "000000")[:6]
    else:
        s += ".000000"
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc).timestamp()


def stored_writes(plane_dir, ns):
    """Who held each of ns's Leases when, by the server's own record: every
    stored write (create, update, patch answered 2xx; delete) from the
    audit log, whose Lease rule is at Request level, as (time, Lease,
    holderIdentity) in stageTimestamp order; holder None after a delete,
    "" after a release, "?" for a patch that did not name one."""
    out = []
    for line in audit_lines(plane_dir):
        e = json.loads(line)
        ref = e.get("objectRef", {})
        if ref.get("namespace") != ns or ref.get("resource") != "leases" \
                or e.get("stage") != "ResponseComplete" \
                or e.get("verb") not in ("create", "update", "patch", "delete"):
            continue
        if not 200 <= e.get("responseStatus", {}).get("code", 0) < 300:
            continue
        body = e.get("requestObject")
        if e["verb"] == "delete":
            holder = None
        elif body is None:
            raise RuntimeError("a Lease write without its requestObject: the audit "
                               "policy's Lease rule must be at Request level")
        else:
            spec = body.get("spec") or {}
            holder = spec.get("holderIdentity") or ""
            if e["verb"] == "patch" and "holderIdentity" not in spec:
                holder = "?"
        # A create names its object in the body, not in the path.
        name = ref.get("name") or (body or {}).get("metadata", {}).get("name")
        out.append((parse_time(e["stageTimestamp"]), name, holder))
    out.sort(key=lambda w: w[0])
    return out


def pieces_of_work(work_log):
    """The marker's pieces of work: (identity, Lease, start, end), end None
    where no exit line followed (the piece ran to the end of the run)."""
    open_, out = {}, []
    with open(work_log) as f:
        for line in f:
            w = line.split()
            if len(w) < 3:
                continue
            lease = w[3] if len(w) > 3 else "bench"
            if w[0] == "start":
                open_[w[1]] = len(out)
                out.append([w[1], lease, float(w[2]), None])
            elif w[0] == "exit" and w[1] in open_:
                out[open_.pop(w[1])][3] = float(w[2])
    return [tuple(p) for p in out]


def judge(writes, pieces):
    """Judge the pieces of work against the holder timeline.

    - overlaps: two pieces on one Lease that ran together (a piece with no
      exit line runs on to the end);
    - unheld: pieces that began while the Lease's last stored write before
      them named someone else (or no write named anyone yet).
    Each finding is a line of text; margin is the least time from the
    stored write a piece's start relied on to that start."""
    overlaps, unheld, margin = [], [], None
    by_lease = {}
    for p in pieces:
        by_lease.setdefault(p[1], []).append(p)
    for lease, ps in by_lease.items():
        ps.sort(key=lambda p: p[2])
        for i, (a, _, a0, a1) in enumerate(ps):
            for b, _, b0, b1 in ps[i + 1:]:
                if a1 is None or b0 < a1:
                    ends = [x for x in (a1, b1) if x is not None]
                    span = f"{(min(ends) - b0) * 1000:.0f} ms" if ends else "until the end"
                    ran = "the end" if a1 is None else f"{a1:.6f}"
                    overlaps.append(f"{lease}: {a} ran {a0:.6f}..{ran}, {b} began at "
                                    f"{b0:.6f}: together {span}")
    timeline = {}
    for t, lease, holder in writes:
        timeline.setdefault(lease, ([], []))
        timeline[lease][0].append(t)
        timeline[lease][1].append(holder)
    for who, lease, start, _ in pieces:
        times, holders = timeline.get(lease, ([], []))
        i = bisect.bisect_right(times, start) - 1
        if i < 0 or holders[i] != who:
            last = f"{holders[i]!r} at {times[i]:.6f}" if i >= 0 else "nothing"
            unheld.append(f"{lease}: {who} began at {start:.6f}; the last stored write named {last}")
        else:
            m = start - times[i]
            margin = m if margin is None else min(margin, m)
    return {"overlaps": overlaps, "unheld": unheld, "pieces": len(pieces),
            "writes": len(writes), "margin": margin}


def overlap_summary(impl, verdict):
    """One line per run: the overlaps (and pieces begun without holding),
    ours as failures, client-go's as client-go's."""
    n = len(verdict["overlaps"])
    text = f"overlaps: {n} ({impl}, {verdict['pieces']} pieces, {verdict['writes']} writes audited)"
    if verdict["unheld"]:
        text += f"; begun without holding: {len(verdict['unheld'])}"
    return text


class Candidate:
    def __init__(self, bench, impl, user, ident, timing, extra=(), name="bench", command=True):
        self.ident, self.impl = ident, impl
        self.lines = queue.Queue()
        b = bench
        exe = b.lease_elect if impl == "ours" else b.client_go
        args = [exe, "--kubeconfig", b.plane.kc(user), "--namespace", b.ns, "--name", name,
                "--identity", ident, "--lease-duration", str(timing[0]),
                "--renew-deadline", str(timing[1]), "--retry-period", str(timing[2])]
        if impl == "ours":
            args += ["--release-on-cancel"]
        args += list(extra)
        if command:
            args += ["--", b.marker, b.work, ident]
        self.err = open(os.path.join(b.tmp, ident + ".stderr"), "w")
        self.p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=self.err, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            self.lines.put((time.time(), line.split()))

    def expect(self, event, who=None, limit=60):
        deadline = time.time() + limit
        while True:
            left = deadline - time.time()
            if left <= 0:
                raise RuntimeError(f"{self.ident} never said {event} {who or ''}")
            try:
                t, words = self.lines.get(timeout=left)
            except queue.Empty:
                continue
            if words and words[0] == event and (who is None or words[1:2] == [who]):
                return t

    def signal(self, sig):
        os.kill(self.p.pid, sig)

    def end(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()

    def rss_kb(self):
        """The elector's processes (lease-elect's supervisor too), COMMAND not."""
        total, pids = 0, [self.p.pid]
        try:
            children = open(f"/proc/{self.p.pid}/task/{self.p.pid}/children").read().split()
        except OSError:
            children = []
        for c in children:
            try:
                cmd = open(f"/proc/{c}/cmdline").read()
            except OSError:
                continue
            if "lease-elect" in cmd:
                pids.append(int(c))
        for pid in pids:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        return total


class Bench:
    def __init__(self, plane, tmp, lease_elect, client_go):
        self.plane, self.tmp = plane, tmp
        self.lease_elect, self.client_go = lease_elect, client_go
        self.marker = os.path.join(tmp, "marker")
        with open(self.marker, "w") as f:
            f.write(MARKER)
        os.chmod(self.marker, 0o755)
        self.n = 0

    def fresh(self, impl, timing):
        """A namespace and a work log of their own for one measurement."""
        self.n += 1
        self.ns = f"bench-{self.n}-{impl}-{timing[0]}"
        self.plane.kubectl("create", "namespace", self.ns)
        self.work = os.path.join(self.tmp, self.ns + ".work")
        open(self.work, "w").close()

    def work_line(self, event, who, limit=60):
        deadline = time.time() + limit
        while time.time() < deadline:
            for line in open(self.work):
                w = line.split()
                if w[:2] == [event, who]:
                    return float(w[2])
            time.sleep(0.02)
        raise RuntimeError(f"no {event} line from {who}")

    def next_start(self, after, limit=60):
        """The first start line, after `after`'s last one, of anyone else's
        work: (time, identity), None if none within limit."""
        deadline = time.time() + limit
        while time.time() < deadline:
            seen = None
            for line in open(self.work):
                w = line.split()
                if w[:2] == ["start", after]:
                    seen = None
                elif w[:1] == ["start"] and seen is None:
                    seen = (float(w[2]), w[1])
            if seen is not None:
                return seen
            time.sleep(0.02)
        return None

    def pair(self, impl, timing, leader_user="elector"):
        a = Candidate(self, impl, leader_user, f"{impl}-a{self.n}", timing)
        a.expect("LEADING")
        self.work_line("start", a.ident)
        b = Candidate(self, impl, "elector", f"{impl}-b{self.n}", timing)
        # The follower has read (or watched) the Lease: it reports the leader.
        b.expect("NEW_LEADER", a.ident)
        time.sleep(2 * timing[2])
        return a, b

    def handover(self, impl, timing):
        self.fresh(impl, timing)
        a, b = self.pair(impl, timing)
        samples = []
        for i in range(3):
            a.signal(15)
            a.p.wait(timeout=60)
            stopped = self.work_line("exit", a.ident)
            started = self.work_line("start", b.ident)
            samples.append(started - stopped)
            if i < 2:
                c = Candidate(self, impl, "elector", f"{impl}-c{self.n}-{i}", timing)
                c.expect("NEW_LEADER", b.ident)
                time.sleep(2 * timing[2])
                a, b = b, c
        a.end()
        b.end()
        return statistics.median(samples)

    def failover(self, impl, timing):
        self.fresh(impl, timing)
        a, b = self.pair(impl, timing)
        a.signal(9)
        a.p.wait()
        spec = json.loads(self.plane.kubectl("get", "lease", "bench", "-n", self.ns, "-o", "json"))["spec"]
        assert spec["holderIdentity"] == a.ident, spec
        last_renew = parse_time(spec["renewTime"])
        started = self.work_line("start", b.ident, limit=5 * timing[0])
        b.end()
        return (started - last_renew) / timing[0]

    def takeover(self, impl, timing):
        self.fresh(impl, timing)
        a, b = self.pair(impl, timing)
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        patch = json.dumps({"spec": {"holderIdentity": "intruder", "renewTime": now,
                                     "leaseDurationSeconds": timing[0]}})
        t0 = time.time()
        self.plane.kubectl("patch", "lease", "bench", "-n", self.ns, "--type", "merge", "-p", patch)
        seen = a.expect("STOPPED", limit=5 * timing[0])
        a.end()
        b.end()
        return seen - t0

    def steady(self, impl, timing, window):
        """Requests/min of leader and follower, CPU s/min per candidate, RSS."""
        self.fresh(impl, timing)
        a, b = self.pair(impl, timing, leader_user="admin")
        time.sleep(timing[2])
        t0, api0, etcd0 = time.time(), self.plane.apiserver_cpu(), self.plane.etcd_cpu()
        time.sleep(window)
        t1, api1, etcd1 = time.time(), self.plane.apiserver_cpu(), self.plane.etcd_cpu()
        rss = (a.rss_kb() + b.rss_kb()) / 2
        a.end()
        b.end()
        by = self.plane.audit(self.ns, t0, t1)
        per_min = 60 / (t1 - t0)
        return {
            "leader": by.get("admin", 0) * per_min,
            "follower": by.get("elector", 0) * per_min,
            "api": (api1 - api0) * per_min,
            "etcd": (etcd1 - etcd0) * per_min,
            "rss": rss,
        }


def verdict_of(bench, plane, impl):
    """The judge on one run: its namespace's stored writes, its work log.
    Ours' findings are failures (returned, and printed); client-go's are
    client-go's, counted and printed as such."""
    v = judge(stored_writes(plane.dir, bench.ns),
              pieces_of_work(bench.work))
    margin = "" if v["margin"] is None else \
        f"; least time from a stored write to the work it let begin: {v['margin'] * 1000:.1f} ms"
    print(f"  {overlap_summary(impl, v)}{margin}", file=sys.stderr)
    for line in v["overlaps"] + v["unheld"]:
        print(f"  {'FAILED' if impl == 'ours' else 'client-go'}: {line}", file=sys.stderr)
    return v


def overlap_cell(impl, v):
    text = f"{len(v['overlaps'])} ({v['pieces']} pieces, {v['writes']} writes)"
    if v["unheld"]:
        text += f", {len(v['unheld'])} begun without holding"
    return text + (" client-go's" if impl == "client-go" and v["overlaps"] + v["unheld"] else "")


def scale(bench, plane, counts, window, idle, per_process=1):
    """N candidates on one Lease. Ours: N lease-elect processes. client-go:
    N client-go-elect processes, or N / per_process processes of
    per_process candidates each (--candidates)."""
    timing = (15, 10, 2)
    rows = []
    for impl in IMPLS:
        for n in counts:
            k = min(per_process, n) if impl == "client-go" else 1
            if n % k:
                raise SystemExit(f"--client-go-per-process {k} does not divide {n}")
            print(f"{impl}: {n} candidates, {n // k} processes", file=sys.stderr)
            bench.fresh(impl, timing)
            if k > 1:
                cands = [Candidate(bench, impl, "elector", f"{impl}-s{bench.n}-{p}", timing,
                                   extra=["--candidates", str(k)]) for p in range(n // k)]

                def process_of(ident):  # <process identity>-<i>
                    return ident.rsplit("-", 1)[0]
            else:
                cands = [Candidate(bench, impl, "elector", f"{impl}-s{bench.n}-{i}", timing)
                         for i in range(n)]

                def process_of(ident):
                    return ident
            leader = None
            deadline = time.time() + 120
            while leader is None and time.time() < deadline:
                for line in open(bench.work):
                    w = line.split()
                    if w[0] == "start":
                        leader = w[1]
                        break
                time.sleep(0.1)
            # Every follower started and has read the Lease at least once.
            time.sleep(10 + n / 50)
            t0, a0, e0 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
            time.sleep(window)
            t1, a1, e1 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
            watches = plane.lease_watches()
            rss = sum(c.rss_kb() for c in cands) / n
            print(f"  window done; {plane.lease_watches():.0f} Lease watches", file=sys.stderr)
            requests = sum(plane.audit(bench.ns, t0, t1).values()) / (t1 - t0)
            per_min = 60 / (t1 - t0)
            handover, samples = None, []
            # Three handovers (fewer if too few processes would be left):
            # SIGTERM the leader's process (with k > 1, its k candidates
            # all stop; the next leader is in another process).
            for _ in range(min(3, len(cands) - 1)):
                lead = next(c for c in cands if c.ident == process_of(leader))
                lead.signal(15)
                stopped = bench.work_line("exit", leader)
                started = bench.next_start(leader, limit=5 * timing[0])
                if started is None:
                    break
                samples.append(started[0] - stopped)
                leader = started[1]
                # Every follower has seen the new leader.
                time.sleep(2 * timing[2])
            if samples:
                handover = statistics.median(samples)
                print(f"  handovers (ms): {[round(x * 1000) for x in samples]}", file=sys.stderr)
            for c in cands:
                if c.p.poll() is None:
                    c.p.terminate()
            for c in cands:
                c.end()
            verdict = verdict_of(bench, plane, impl)
            rows.append({"impl": impl, "n": n, "k": k, "rps": requests,
                         "api": (a1 - a0) * per_min - idle[0],
                         "etcd": (e1 - e0) * per_min - idle[1],
                         "watches": watches, "rss": rss, "handover": handover,
                         "verdict": verdict})
            print("  " + str({k: v for k, v in rows[-1].items() if k != "verdict"}), file=sys.stderr)
    print("| side | candidates | requests/s at the API server | kube-apiserver CPU s/min | "
          "etcd CPU s/min | Lease watches open | RSS per candidate (MB) | graceful handover, median of 3 (ms) "
          "| overlaps (pieces of work, Lease writes audited) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        h = "-" if r["handover"] is None else f"{r['handover'] * 1000:.0f}"
        n = f"{r['n']}" if r["k"] == 1 else f"{r['n']} ({r['n'] // r['k']} processes)"
        print(f"| {r['impl']} | {n} | {r['rps']:.2f} | {r['api']:.2f} | {r['etcd']:.2f} | "
              f"{r['watches']:.0f} | {r['rss'] / 1024:.1f} | {h} | "
              f"{overlap_cell(r['impl'], r['verdict'])} |")
    print()
    print("| side | per candidate: requests/s | kube-apiserver CPU s/min | etcd CPU s/min | RSS (MB) "
          "| predicted at 10,000: requests/s | kube-apiserver cores | etcd cores |")
    print("|---|---|---|---|---|---|---|---|")
    for impl in IMPLS:
        r = max((r for r in rows if r["impl"] == impl), key=lambda r: r["n"])
        n = r["n"]
        rps, api, etcd = r["rps"] / n, r["api"] / n, r["etcd"] / n
        print(f"| {impl} (from {n}) | {rps:.3f} | {api:.4f} | {etcd:.4f} | {r['rss'] / 1024:.1f} | "
              f"{rps * 10000:.0f} | {api * 10000 / 60:.1f} | {etcd * 10000 / 60:.1f} |")
    return rows


def leases(bench, plane, n, window, idle):
    """n Leases with one candidate each (a sharded controller's shape): ours
    n lease-elect processes, client-go's n in one process (--lease-each);
    each leader runs the marker, so that the judge has its pieces of work."""
    timing = (15, 10, 2)
    rows = []
    for impl in IMPLS:
        print(f"{impl}: {n} Leases", file=sys.stderr)
        bench.fresh(impl, timing)
        t_start = time.time()
        if impl == "client-go":
            cands = [Candidate(bench, impl, "elector", f"{impl}-l{bench.n}", timing,
                               extra=["--candidates", str(n), "--lease-each"])]
        else:
            cands = [Candidate(bench, impl, "elector", f"{impl}-l{bench.n}-{i}", timing,
                               name=f"bench-{i}") for i in range(n)]
        held = 0
        while held < n and time.time() < t_start + 300:
            time.sleep(2)
            items = json.loads(plane.kubectl("get", "leases", "-n", bench.ns, "-o", "json"))["items"]
            held = sum(1 for l in items if l["spec"].get("holderIdentity"))
        all_led = time.time() - t_start
        time.sleep(10)
        t0, a0, e0 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
        time.sleep(window)
        t1, a1, e1 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
        watches = plane.lease_watches()
        rss = sum(c.rss_kb() for c in cands) / n
        requests = sum(plane.audit(bench.ns, t0, t1).values()) / (t1 - t0)
        per_min = 60 / (t1 - t0)
        for c in cands:
            if c.p.poll() is None:
                c.p.terminate()
        for c in cands:
            c.end()
        verdict = verdict_of(bench, plane, impl)
        rows.append({"impl": impl, "n": n, "held": held, "all_led": all_led, "rps": requests,
                     "api": (a1 - a0) * per_min - idle[0], "etcd": (e1 - e0) * per_min - idle[1],
                     "watches": watches, "rss": rss, "verdict": verdict})
        print("  " + str({k: v for k, v in rows[-1].items() if k != "verdict"}), file=sys.stderr)
    print("| side | Leases (1 candidate each) | all led after (s) | requests/s at the API server | "
          "kube-apiserver CPU s/min | etcd CPU s/min | Lease watches open | RSS per candidate (MB) "
          "| overlaps (pieces of work, Lease writes audited) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['impl']} | {r['held']} of {r['n']} | {r['all_led']:.0f} | {r['rps']:.1f} | "
              f"{r['api']:.2f} | {r['etcd']:.2f} | {r['watches']:.0f} | {r['rss'] / 1024:.1f} | "
              f"{overlap_cell(r['impl'], r['verdict'])} |")
    return rows


class JudgeSelfTest(unittest.TestCase):
    """The judge on made-up timelines: it must find what is there."""

    # a acquires, renews, releases; b acquires after the release.
    WRITES = [(0.0, "bench", "a"), (1.0, "bench", "a"), (2.0, "bench", ""), (2.01, "bench", "b")]

    def test_a_clean_handover_is_no_overlap(self):
        v = judge(self.WRITES, [("a", "bench", 0.1, 1.99), ("b", "bench", 2.05, 3.0)])
        self.assertEqual((v["overlaps"], v["unheld"]), ([], []))
        self.assertAlmostEqual(v["margin"], 0.04)

    def test_work_that_outlives_the_release_overlaps_the_next(self):
        v = judge(self.WRITES, [("a", "bench", 0.1, 2.5), ("b", "bench", 2.05, 3.0)])
        self.assertEqual(len(v["overlaps"]), 1, v)
        self.assertIn("together 450 ms", v["overlaps"][0])

    def test_work_with_no_exit_line_runs_to_the_end(self):
        v = judge(self.WRITES, [("a", "bench", 0.1, None), ("b", "bench", 2.05, 3.0)])
        self.assertEqual(len(v["overlaps"]), 1, v)

    def test_work_begun_before_its_write_is_unheld(self):
        v = judge(self.WRITES, [("a", "bench", 0.1, 1.2), ("b", "bench", 1.5, 3.0)])
        self.assertEqual(v["overlaps"], [])
        self.assertEqual(len(v["unheld"]), 1, v)
        self.assertIn("'a' at 1.000000", v["unheld"][0])

    def test_work_before_any_write_is_unheld(self):
        v = judge([], [("a", "bench", 0.1, 1.2)])
        self.assertEqual(len(v["unheld"]), 1, v)

    def test_pieces_on_two_leases_do_not_overlap(self):
        writes = [(0.0, "bench-0", "a"), (0.0, "bench-1", "b")]
        v = judge(writes, [("a", "bench-0", 0.1, 9.0), ("b", "bench-1", 0.1, 9.0)])
        self.assertEqual((v["overlaps"], v["unheld"]), ([], []))

    def test_from_the_logs_an_overlap_is_reported(self):
        """Through the files, shaped as kube-apiserver and the marker write them."""

        def event(verb, code, at, holder=None, name="bench"):
            e = {"stage": "ResponseComplete", "verb": verb, "auditID": at,
                 "objectRef": {"resource": "leases", "namespace": "ns",
                               "name": "" if verb == "create" else name},
                 "responseStatus": {"code": code},
                 "stageTimestamp": f"2026-12-06T20:00:{at}Z"}
            if holder is not None:
                e["requestObject"] = {"metadata": {"name": name},
                                      "spec": {"holderIdentity": holder}}
            return json.dumps(e)

        with tempfile.TemporaryDirectory() as d:
            audit, work = os.path.join(d, "audit.log"), os.path.join(d, "work")
            # kube-apiserver rotates its log (at 100 MB unless told): the
            # first writes are in the rotated file.
            with open(os.path.join(d, "audit-2026-12-06T20-00-01.000.log"), "w") as f:
                print(event("get", 404, "00.000000"), file=f)
                print(event("create", 201, "00.100000", "a"), file=f)
            with open(audit, "w") as f:
                print(event("update", 409, "00.200000", "b"), file=f)  # lost: not a holder
                print(event("update", 200, "02.000000", ""), file=f)
                print(event("update", 200, "02.010000", "b"), file=f)
                print(event("create", 201, "00.100000", "x", name="other"), file=f)
            t = parse_time("2026-12-06T20:00:00Z")
            with open(work, "w") as f:
                f.write(f"start a {t + 0.2:.6f} bench\n")
                f.write(f"start b {t + 2.05:.6f} bench\n")
                f.write(f"exit a {t + 2.3:.6f} bench\n")
                f.write(f"exit b {t + 3:.6f} bench\n")
            writes = stored_writes(d, "ns")
            self.assertEqual([w[2] for w in writes], ["a", "x", "", "b"])
            v = judge(writes, pieces_of_work(work))
            self.assertEqual(len(v["overlaps"]), 1, v)
            self.assertEqual(v["unheld"], [])
            self.assertEqual(overlap_summary("ours", v),
                             "overlaps: 1 (ours, 2 pieces, 4 writes audited)")
            # A Lease write logged at Metadata level cannot be judged: say so.
            with open(audit, "a") as f:
                print(event("update", 200, "03.000000"), file=f)
            with self.assertRaises(RuntimeError):
                stored_writes(d, "ns")


def main():
    if "--self-test" in sys.argv:
        sys.argv.remove("--self-test")
        unittest.main(defaultTest="JudgeSelfTest", argv=sys.argv[:1], verbosity=2)
    window = 60.0
    if "--window" in sys.argv:
        window = float(sys.argv[sys.argv.index("--window") + 1])
    env = dict(os.environ, CARGO_BUILD_JOBS=os.environ.get("CARGO_BUILD_JOBS", "1"))
    print("building lease-elect (release) and client-go-elect ...", file=sys.stderr)
    subprocess.run(["cargo", "build", "--quiet", "--release", "--features", "cli", "--bin",
                    "lease-elect"], cwd=ROOT, check=True, env=env)
    subprocess.run([PLANE, "build"], check=True)
    paths = dict(l.split("=", 1) for l in sh(PLANE, "env").split())
    lease_elect = os.path.join(ROOT, "target", "release", "lease-elect")
    client_go = paths["LEASE_ELECTOR_CLIENT_GO"]
    tmp = tempfile.mkdtemp(prefix="lease-elector-client-go-bench-")
    plane_dir = os.path.join(tmp, "plane")
    subprocess.run([PLANE, "up", plane_dir], check=True, stdout=subprocess.DEVNULL)
    rows = {}
    try:
        plane = Plane(plane_dir)
        bench = Bench(plane, tmp, lease_elect, client_go)
        # The idle control plane's CPU, to take from each steady window.
        time.sleep(5)
        t0, a0, e0 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
        time.sleep(window)
        t1, a1, e1 = time.time(), plane.apiserver_cpu(), plane.etcd_cpu()
        idle = ((a1 - a0) * 60 / (t1 - t0), (e1 - e0) * 60 / (t1 - t0))
        print(f"idle control plane: kube-apiserver {idle[0]:.3f} CPU s/min, etcd {idle[1]:.3f}",
              file=sys.stderr)
        judged = None
        if "--leases" in sys.argv:
            judged = leases(bench, plane, int(sys.argv[sys.argv.index("--leases") + 1]), window,
                            idle)
        elif "--scale" in sys.argv:
            counts = [int(c) for c in sys.argv[sys.argv.index("--scale") + 1].split(",")]
            per_process = 1
            if "--client-go-per-process" in sys.argv:
                per_process = int(sys.argv[sys.argv.index("--client-go-per-process") + 1])
            judged = scale(bench, plane, counts, window, idle, per_process)
        if judged is not None:
            failed = [r for r in judged if r["impl"] == "ours"
                      and r["verdict"]["overlaps"] + r["verdict"]["unheld"]]
            if failed:
                print(f"FAILED: ours overlapped or began without holding at "
                      f"{[r['n'] for r in failed]} (lines above)", file=sys.stderr)
                sys.exit(1)
            return
        for timing in TIMINGS:
            for impl in IMPLS:
                key = (timing, impl)
                print(f"{impl} at {timing}", file=sys.stderr)
                r = {"handover": bench.handover(impl, timing),
                     "failover": bench.failover(impl, timing),
                     "takeover": bench.takeover(impl, timing)}
                r.update(bench.steady(impl, timing, window))
                r["api"] = (r["api"] - idle[0]) / 2
                r["etcd"] = (r["etcd"] - idle[1]) / 2
                rows[key] = r
                print(f"  {r}", file=sys.stderr)
    finally:
        subprocess.run([PLANE, "down", plane_dir], check=False)
        print(f"logs and the audit log left in {tmp}", file=sys.stderr)
    sizes = {"ours": os.path.getsize(lease_elect), "client-go": os.path.getsize(client_go)}

    figures = [
        ("graceful handover, COMMAND to COMMAND (ms)", "handover", lambda v: v * 1000, "{:.0f}"),
        ("crash failover after the last renew (lease durations)", "failover", None, "{:.2f}"),
        ("foreign takeover seen by the leader (ms)", "takeover", lambda v: v * 1000, "{:.0f}"),
        ("requests/min, leader", "leader", None, "{:.1f}"),
        ("requests/min, follower", "follower", None, "{:.1f}"),
        ("kube-apiserver CPU s/min per candidate", "api", None, "{:.3f}"),
        ("etcd CPU s/min per candidate", "etcd", None, "{:.3f}"),
        ("candidate RSS (MB)", "rss", lambda v: v / 1024, "{:.1f}"),
    ]
    head = "| figure | " + " | ".join(
        f"ours {t[0]}/{t[1]}/{t[2]} s | client-go {t[0]}/{t[1]}/{t[2]} s | ratio" for t in TIMINGS) + " |"
    print(head)
    print("|---|" + "---|---|---|" * len(TIMINGS))

    def cell(fmt, v):
        return fmt.format(v)

    def ratio(o, c):
        return f"{o / c:.2f}" if c else "-"

    for title, key, conv, fmt in figures:
        out = [title]
        for t in TIMINGS:
            o, c = rows[(t, "ours")][key], rows[(t, "client-go")][key]
            if conv:
                o, c = conv(o), conv(c)
            out += [cell(fmt, o), cell(fmt, c), ratio(o, c)]
        print("| " + " | ".join(out) + " |")
    o, c = sizes["ours"] / 1e6, sizes["client-go"] / 1e6
    out = ["binary (stripped; lease-elect release, client-go-elect -s -w) (MB)"]
    for _ in TIMINGS:
        out += [f"{o:.2f}", f"{c:.2f}", ratio(o, c)]
    print("| " + " | ".join(out) + " |")


if __name__ == "__main__":
    main()
