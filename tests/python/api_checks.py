"""The official Python client's CoordinationV1Api against a Kubernetes API
server, unmodified: create, get, list (with a label selector), replace, a
stale replace (409), watch and delete of one Lease.

usage: api_checks.py KUBECONFIG NAMESPACE

Prints one JSON object per line: {"check": NAME, "ok": BOOL, "detail": STR}.
Exits 0 when every check ran (whatever their verdicts; the caller judges).
"""

import datetime
import json
import sys
import threading

from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

KUBECONFIG, NS = sys.argv[1:3]
NAME = "py-checks"


def report(check, ok, detail=""):
    print(json.dumps({"check": check, "ok": bool(ok), "detail": str(detail)}), flush=True)


def status_of(call):
    """The HTTP status an API call ends with (200 when it returns)."""
    try:
        call()
        return 200
    except ApiException as e:
        return e.status


config.load_kube_config(config_file=KUBECONFIG)
api = client.CoordinationV1Api()
now = datetime.datetime.now(datetime.timezone.utc)

lease = client.V1Lease(
    metadata=client.V1ObjectMeta(name=NAME, labels={"app": "py"}),
    spec=client.V1LeaseSpec(
        holder_identity="py-a",
        lease_duration_seconds=15,
        acquire_time=now,
        renew_time=now,
        lease_transitions=0,
    ),
)
created = api.create_namespaced_lease(NS, lease)
report(
    "create",
    created.metadata.resource_version and created.spec.holder_identity == "py-a",
    created.metadata.resource_version,
)
# The microseconds survive the round trip, whatever form they were sent in.
report("create keeps the renew time", created.spec.renew_time == now, created.spec.renew_time)

got = api.read_namespaced_lease(NAME, NS)
report(
    "get",
    got.metadata.uid == created.metadata.uid and got.spec.holder_identity == "py-a",
    got.metadata.uid,
)

names = [l.metadata.name for l in api.list_namespaced_lease(NS).items]
report("list", NAME in names, names)
selected = [l.metadata.name for l in api.list_namespaced_lease(NS, label_selector="app=py").items]
others = api.list_namespaced_lease(NS, label_selector="app=other").items
report("list with a label selector", selected == [NAME] and not others, selected)
everywhere = [l.metadata.name for l in api.list_lease_for_all_namespaces().items]
report("list in every namespace", NAME in everywhere, everywhere)

# A watch from the created version sees the replace below.
events = []
seen = threading.Event()


def watch_changes():
    w = watch.Watch()
    for e in w.stream(
        api.list_namespaced_lease,
        NS,
        resource_version=created.metadata.resource_version,
        timeout_seconds=10,
    ):
        events.append((e["type"], e["object"].spec.holder_identity))
        if e["type"] == "MODIFIED":
            seen.set()
            w.stop()


watcher = threading.Thread(target=watch_changes, daemon=True)
watcher.start()

got.spec.holder_identity = "py-b"
got.spec.renew_time = datetime.datetime.now(datetime.timezone.utc)
replaced = api.replace_namespaced_lease(NAME, NS, got)
report(
    "replace",
    replaced.spec.holder_identity == "py-b"
    and int(replaced.metadata.resource_version) > int(got.metadata.resource_version),
    replaced.metadata.resource_version,
)

# `got` still carries the version the replace above made stale.
got.spec.holder_identity = "py-c"
report("stale replace is 409", status_of(lambda: api.replace_namespaced_lease(NAME, NS, got)) == 409)

report("watch", seen.wait(10) and ("MODIFIED", "py-b") in events, events)
watcher.join(10)

deleted = api.delete_namespaced_lease(NAME, NS)
# This client version returns the Status as a plain dict.
outcome = deleted.get("status") if isinstance(deleted, dict) else getattr(deleted, "status", None)
report("delete", outcome == "Success", deleted)
report("get after delete is 404", status_of(lambda: api.read_namespaced_lease(NAME, NS)) == 404)
