"""One candidate of the official Python client's leader election
(`kubernetes.leaderelection`, `LeaseLock`), unmodified, reporting its terms.

usage: candidate.py KUBECONFIG NAMESPACE NAME IDENTITY LEASE RENEW RETRY

Prints one JSON line per event on stdout, with the wall-clock time:
{"event": "start"|"stop"|"exit", "identity": ID, "t": SECONDS}. "start" when
the library calls onstarted_leading, "stop" when it calls onstopped_leading
or when SIGTERM arrives while leading (the library has no release: the
lease is left to expire), "exit" when run() returns.
"""

import json
import logging
import os
import signal
import sys
import threading
import time

from kubernetes import config
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

KUBECONFIG, NS, NAME, IDENTITY = sys.argv[1:5]
LEASE, RENEW, RETRY = (int(a) for a in sys.argv[5:8])

logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                    format="%(asctime)s " + IDENTITY + " %(message)s")

lock = threading.Lock()
leading = False


def report(event):
    print(json.dumps({"event": event, "identity": IDENTITY, "t": time.time()}), flush=True)


def on_started():
    global leading
    with lock:
        leading = True
        report("start")
    # Lead until the renew loop gives up or the process is stopped.
    threading.Event().wait()


def on_stopped():
    global leading
    with lock:
        if leading:
            leading = False
            report("stop")


def on_sigterm(signum, frame):
    on_stopped()
    os._exit(0)


signal.signal(signal.SIGTERM, on_sigterm)
config.load_kube_config(config_file=KUBECONFIG)
cfg = electionconfig.Config(
    LeaseLock(NAME, NS, IDENTITY),
    lease_duration=LEASE,
    renew_deadline=RENEW,
    retry_period=RETRY,
    onstarted_leading=on_started,
    onstopped_leading=on_stopped,
)
report("ready")
leaderelection.LeaderElection(cfg).run()
report("exit")
