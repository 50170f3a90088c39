# A fake cluster on your laptop: the README's walk-through, line for line
# (CI runs it whole: bash -e examples/fake-cluster.sh). Needs kubectl. Short
# timings (lease 4 s, renew deadline 3 s, retry period 1 s): quick failovers.
trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # on exit, stop what is left

# 1. The embedded API server (the lease-elector-test-server binary), with a
#    kubeconfig for kubectl and the candidates.
rm -f /tmp/fake.kubeconfig
cargo run -q --features testing --bin lease-elector-test-server -- --kubeconfig /tmp/fake.kubeconfig --tls --token t0k3n &
SERVER=$!
until [ -s /tmp/fake.kubeconfig ]; do sleep 0.5; done  # the first run compiles
export KUBECONFIG=/tmp/fake.kubeconfig
kubectl get leases  # No resources found in default namespace.

# 2. Two candidates for one Lease: pod-a starts first and leads.
cargo run -q --example elect -- --name demo --identity pod-a --release-on-cancel --lease-duration 4 --renew-deadline 3 --retry-period 1 &
POD_A=$!
kubectl wait lease/demo --for=create --timeout=120s  # the first run compiles
kubectl wait lease/demo --for=jsonpath='{.spec.holderIdentity}'=pod-a --timeout=10s
cargo run -q --example elect -- --name demo --identity pod-b --release-on-cancel --lease-duration 4 --renew-deadline 3 --retry-period 1 &
POD_B=$!
kubectl get leases  # demo   pod-a   ...

# 3. Failover by SIGTERM: pod-a releases the Lease (--release-on-cancel);
#    pod-b, which watches it, takes over at once.
kill -TERM $POD_A
kubectl wait lease/demo --for=jsonpath='{.spec.holderIdentity}'=pod-b --timeout=10s

# 4. Failover by SIGKILL: nothing is released; pod-c takes over once the
#    Lease has gone unrenewed for its duration (4 s).
cargo run -q --example elect -- --name demo --identity pod-c --release-on-cancel --lease-duration 4 --renew-deadline 3 --retry-period 1 &
POD_C=$!
kubectl wait lease/demo --for=jsonpath='{.spec.holderIdentity}'=pod-b --timeout=10s
kill -KILL $POD_B
kubectl wait lease/demo --for=jsonpath='{.spec.holderIdentity}'=pod-c --timeout=30s
kubectl get lease demo -o jsonpath='{.spec.leaseTransitions}{"\n"}'  # 2: one per takeover

# 5. The leadership Events the candidates recorded, as library-go records them.
kubectl get events  # pod-a became leader, pod-a stopped leading, pod-b became leader, ...

# 6. Done: stop the last candidate (it releases the Lease), then the server.
kill -TERM $POD_C
wait $POD_C
kubectl get lease demo -o jsonpath='{.spec.holderIdentity}{"\n"}'  # empty: released
kill -TERM $SERVER
wait
unset KUBECONFIG  # the fake cluster is gone: back to your own
