"""A Python worker of the R15 interop suite (testrig/verify/interop).

    pyworker.py lock   CONFIG_JSON   # acquire, fenced read/write at the oracle, release; N cycles
    pyworker.py child  CONFIG_JSON   # run by `leasehold run`: one fenced read/write with $LEASEHOLD_TOKEN

The negative control gives "lock_key" (the lease actually taken, records
still under "key": a client that ignores the lock) and "barrier" (a
directory: each holder waits there until every other one holds too, so
their critical sections surely overlap).

It writes the Go harness's events (testrig/verify/event.go) to stdout, one
JSON object a line: "call"/"ret" for every acquire and release (so the
porcupine lease model checks Python's history with Go's), and "cs" for
every critical section, [grant returned, release called or local deadline
if earlier], on CLOCK_MONOTONIC (time.monotonic_ns(), the clock Go's
verify.Mono reads). It imports the leasehold package from PYTHONPATH.
"""

import json
import os
import random
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import leasehold

_out = threading.Lock()


def emit(ev):
    with _out:
        sys.stdout.write(json.dumps(ev, separators=(",", ":")) + "\n")
        sys.stdout.flush()


def log(wid, msg):
    emit({"e": "log", "w": wid, "t": time.monotonic_ns(), "msg": msg})


def oracle(base, path, key, proc, token, **extra):
    q = dict(k=key, p=proc, pid=str(os.getpid()), tok=str(token), **{k: str(v) for k, v in extra.items()})
    req = urllib.request.Request(f"{base}/{path}?{urllib.parse.urlencode(q)}", data=b"", method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            body = r.read()
    except urllib.error.HTTPError as e:
        if e.code == 409:
            return None  # a stale token: refused by the fenced resource
        raise
    return json.loads(body)["value"] if path == "read" else True


def lock(cfg):
    wid, key, proc = cfg["id"], cfg["key"], "p0"
    owner = f"py-{wid}"
    ttl = cfg["ttl"]
    client = leasehold.Client(cfg["store"], owner=owner)
    seq = 0
    for n in range(cfg["cycles"]):
        seq += 1
        rid = f"{wid}-{n}"
        emit({"e": "call", "w": wid, "seq": seq, "p": proc, "k": key, "op": "acquire", "o": owner, "rid": rid,
              "ttl": int(ttl * 1e9), "t": time.monotonic_ns()})
        try:
            lease = client.acquire(cfg.get("lock_key", key), ttl=ttl, timeout=cfg["acquire_timeout"], request_id=rid)
        except leasehold.Held as e:
            emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": time.monotonic_ns(), "out": e.token, "h": e.owner})
            log(wid, f"acquire {key}: {e}")
            continue
        except leasehold.LeaseholdError as e:
            emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": time.monotonic_ns(), "unk": True})
            log(wid, f"acquire {key}: {e}")
            proc = f"p{n + 1}"  # retired after an indeterminate result
            continue
        frm = time.monotonic_ns()
        emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": frm, "ok": True, "out": lease.token})
        wrote = False
        if cfg.get("barrier"):
            barrier(cfg["barrier"], wid, cfg["parties"])
        v = oracle(cfg["oracle"], "read", key, proc, lease.token)
        if v is not None:
            time.sleep(cfg["hold"])
            # Write only while the deadline is comfortably ahead, as the Go worker does.
            if lease.held and lease.deadline - time.monotonic() >= ttl / 4:
                wrote = bool(oracle(cfg["oracle"], "write", key, proc, lease.token, read=v,
                                    deadline=int(lease.deadline * 1e9)))
        to = min(time.monotonic_ns(), int(lease.deadline * 1e9))
        emit({"e": "cs", "w": wid, "p": proc, "k": key, "tok": lease.token, "from": frm, "to": to,
              "wrote": wrote, "lost": lease.lost.is_set(), "t": time.monotonic_ns()})
        seq += 1
        emit({"e": "call", "w": wid, "seq": seq, "p": proc, "k": key, "op": "release", "o": owner,
              "tok": lease.token, "t": time.monotonic_ns()})
        try:
            lease.release()
            emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": time.monotonic_ns(), "ok": True})
        except leasehold.Lost:
            emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": time.monotonic_ns()})
        except leasehold.LeaseholdError as e:
            emit({"e": "ret", "w": wid, "seq": seq, "k": key, "t": time.monotonic_ns(), "unk": True})
            log(wid, f"release {key}: {e}")
            proc = f"p{n + 1}"
        if cfg.get("gap"):
            time.sleep(random.uniform(0, cfg["gap"]))  # leave the lock idle now and then
    client.close()


def barrier(d, wid, parties):
    open(os.path.join(d, wid), "w").close()
    end = time.monotonic() + 60
    while len(os.listdir(d)) < parties and time.monotonic() < end:
        time.sleep(0.005)


def child(cfg):
    """One critical section under `leasehold run`: the lease is the supervisor's,
    its token in $LEASEHOLD_TOKEN; the section lasts from this process's start
    to its last line (the supervisor releases only after it has exited)."""
    frm = time.monotonic_ns()
    token = int(os.environ["LEASEHOLD_TOKEN"])
    wid, key, proc = cfg["id"], cfg["key"], "p0"
    wrote = False
    v = oracle(cfg["oracle"], "read", key, proc, token)
    if v is not None:
        time.sleep(cfg["hold"])
        wrote = bool(oracle(cfg["oracle"], "write", key, proc, token, read=v))
    emit({"e": "cs", "w": wid, "p": proc, "k": key, "tok": token, "from": frm, "to": time.monotonic_ns(),
          "wrote": wrote, "t": time.monotonic_ns()})


if __name__ == "__main__":
    mode, cfg = sys.argv[1], json.loads(sys.argv[2])
    {"lock": lock, "child": child}[mode](cfg)
