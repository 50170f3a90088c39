// The official JavaScript client (@kubernetes/client-node, unmodified)
// against the embedded API server: one scenario per run, each check one
// JSON line on stdout ({"check": ..., "ok": ..., "got": ...}), for
// tests/js_client.rs.
//
//   node checks.mjs CLIENT_INDEX_JS KUBECONFIG SCENARIO NAMESPACE

const [modulePath, kubeconfig, scenario, ns] = process.argv.slice(2);
const k8s = await import(modulePath);

const kc = new k8s.KubeConfig();
kc.loadFromFile(kubeconfig);
// client-node 2.x talks plain HTTP only to a cluster marked
// skipTLSVerify, as its users set it for a local API server.
kc.loadFromOptions({
  clusters: kc.clusters.map((c) => ({ ...c, skipTLSVerify: c.server.startsWith('http:') })),
  users: kc.users,
  contexts: kc.contexts,
  currentContext: kc.currentContext,
});
const coord = kc.makeApiClient(k8s.CoordinationV1Api);
const core = kc.makeApiClient(k8s.CoreV1Api);
const eventsV1 = kc.makeApiClient(k8s.EventsV1Api);

function report(check, ok, got) {
  console.log(JSON.stringify({ check, ok: Boolean(ok), got }));
}

// The status code, headers and body of a call, whether it succeeded or not.
async function call(f) {
  try {
    const r = await f();
    return { code: r.httpStatusCode, headers: r.headers, body: r.data };
  } catch (e) {
    if (e.code === undefined) throw e;
    let body = e.body;
    if (typeof body === 'string') {
      try { body = JSON.parse(body); } catch { /* keep the text */ }
    }
    return { code: e.code, headers: e.headers, body };
  }
}

const as = (type) => k8s.setHeaderOptions('Content-Type', type);
const lease = (name, holder, labels) => ({
  apiVersion: 'coordination.k8s.io/v1',
  kind: 'Lease',
  metadata: { name, labels },
  spec: { holderIdentity: holder, leaseDurationSeconds: 15 },
});
const createLease = (name, holder, labels, namespace = ns) =>
  call(() => coord.createNamespacedLeaseWithHttpInfo({ namespace, body: lease(name, holder, labels) }));
const readLease = (name, namespace = ns) =>
  call(() => coord.readNamespacedLeaseWithHttpInfo({ name, namespace }));
const summary = (r) => ({ code: r.code, message: r.body?.message, reason: r.body?.reason });

// Collect the events of a watch on `path` until `enough` of them arrived,
// the watch ended, or `ms` passed.
async function watchEvents(path, params, enough, ms) {
  const events = [];
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  const timer = setTimeout(finish, ms);
  const req = await new k8s.Watch(kc).watch(path, params, (type, obj) => {
    events.push({ type, name: obj?.metadata?.name, rv: obj?.metadata?.resourceVersion,
      code: obj?.code, reason: obj?.reason, message: obj?.message, at: Date.now() });
    if (events.length >= enough) finish();
  }, () => finish());
  await done;
  clearTimeout(timer);
  req.abort();
  return events;
}

const leasesPath = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`;

const scenarios = {
  async 'json-patch'() {
    await createLease('jp', 'a');
    // No Content-Type option: the client's default patch type.
    const r = await call(() => coord.patchNamespacedLeaseWithHttpInfo({
      name: 'jp', namespace: ns,
      body: [{ op: 'replace', path: '/spec/holderIdentity', value: 'b' }],
    }));
    report('the default patch type (JSON patch) is served', r.code === 200 && r.body?.spec?.holderIdentity === 'b', summary(r));
    const labelled = await call(() => coord.patchNamespacedLeaseWithHttpInfo({
      name: 'jp', namespace: ns,
      body: [{ op: 'add', path: '/metadata/labels', value: { app: 'x' } }],
    }, as(k8s.PatchStrategy.JsonPatch)));
    report('an explicit JSON patch adds a label', labelled.code === 200 && labelled.body?.metadata?.labels?.app === 'x', summary(labelled));
    const failed = await call(() => coord.patchNamespacedLeaseWithHttpInfo({
      name: 'jp', namespace: ns,
      body: [{ op: 'test', path: '/spec/holderIdentity', value: 'nobody' }],
    }, as(k8s.PatchStrategy.JsonPatch)));
    report('a JSON patch whose test fails is 422 Invalid', failed.code === 422 && failed.body?.reason === 'Invalid', summary(failed));
  },

  async 'apply'() {
    const ssa = as(k8s.PatchStrategy.ServerSideApply);
    const apply = (holder, fieldManager, force) => call(() => coord.patchNamespacedLeaseWithHttpInfo({
      name: 'ssa', namespace: ns, body: lease('ssa', holder), fieldManager, force,
    }, ssa));
    const created = await apply('a', 'js-a', false);
    report('apply creates a missing lease', created.code === 201 && created.body?.spec?.holderIdentity === 'a', summary(created));
    const again = await apply('a', 'js-a', false);
    report('applying the same configuration again is 200', again.code === 200, summary(again));
    const conflict = await apply('b', 'js-b', false);
    report('another manager changing an owned field is 409', conflict.code === 409 && conflict.body?.reason === 'Conflict' &&
      conflict.body?.message === 'Apply failed with 1 conflict: conflict with "js-a": .spec.holderIdentity', summary(conflict));
    const forced = await apply('b', 'js-b', true);
    report('force takes the field', forced.code === 200 && forced.body?.spec?.holderIdentity === 'b', summary(forced));
    const anonymous = await apply('c', undefined, undefined);
    report('apply without a fieldManager is 422', anonymous.code === 422 &&
      anonymous.body?.message === 'PatchOptions.meta.k8s.io "" is invalid: fieldManager: Required value: is required for apply patch', summary(anonymous));
  },

  async 'watch-resume'() {
    const r1 = await createLease('w1', 'a');
    const from = r1.body.metadata.resourceVersion;
    const modified = { ...r1.body, spec: { ...r1.body.spec, holderIdentity: 'b' } };
    await call(() => coord.replaceNamespacedLeaseWithHttpInfo({ name: 'w1', namespace: ns, body: modified }));
    await createLease('w2', 'c');
    await call(() => coord.deleteNamespacedLeaseWithHttpInfo({ name: 'w2', namespace: ns }));
    const events = await watchEvents(leasesPath, { resourceVersion: from }, 3, 5000);
    const seen = events.map((e) => `${e.type} ${e.name}`);
    report('a watch resumed from a resourceVersion replays every later event',
      JSON.stringify(seen) === JSON.stringify(['MODIFIED w1', 'ADDED w2', 'DELETED w2']), seen);
  },

  async 'watch-expired'() {
    // tests/js_client.rs wrote more Leases than the watch window keeps.
    const events = await watchEvents(leasesPath, { resourceVersion: '1' }, 1, 5000);
    const e = events[0] ?? {};
    report('a watch from a version older than the window gets 410 Expired',
      events.length === 1 && e.type === 'ERROR' && e.code === 410 && e.reason === 'Expired' &&
      /^too old resource version: 1 \(\d+\)$/.test(e.message), events);
  },

  async 'bookmarks'() {
    const start = Date.now();
    const events = await watchEvents(leasesPath, { allowWatchBookmarks: true, timeoutSeconds: 3 }, 1, 6000);
    const b = events.find((e) => e.type === 'BOOKMARK');
    report('a watch that allows bookmarks gets one before it times out',
      b !== undefined && Number(b.rv) > 0 && b.at - start < 3000, events.map((e) => ({ ...e, after: e.at - start })));
  },

  async 'namespaces'() {
    const def = await call(() => core.readNamespaceWithHttpInfo({ name: 'default' }));
    report('GET /api/v1/namespaces/default', def.code === 200 && def.body?.status?.phase === 'Active', summary(def));
    const all = await call(() => core.listNamespaceWithHttpInfo({}));
    const names = (all.body?.items ?? []).map((n) => n.metadata.name);
    report('GET /api/v1/namespaces lists the four a cluster starts with',
      ['default', 'kube-node-lease', 'kube-public', 'kube-system'].every((n) => names.includes(n)), names);
    const created = await call(() => core.createNamespaceWithHttpInfo({ body: { metadata: { name: 'js-team' } } }));
    report('a namespace is created', created.code === 201, summary(created));
    const inside = await createLease('in-team', 'a', undefined, 'js-team');
    report('a lease is created in it', inside.code === 201, summary(inside));
    const missing = await createLease('nowhere', 'a', undefined, 'js-missing');
    report('a lease in a namespace that does not exist is 404', missing.code === 404 &&
      missing.body?.message === 'namespaces "js-missing" not found', summary(missing));
    const deleted = await call(() => core.deleteNamespaceWithHttpInfo({ name: 'js-team' }));
    report('the namespace is deleted', deleted.code === 200, summary(deleted));
    const gone = await readLease('in-team', 'js-team');
    report('its lease went with it', gone.code === 404, summary(gone));
    const immortal = await call(() => core.deleteNamespaceWithHttpInfo({ name: 'default' }));
    report('default may not be deleted', immortal.code === 403 &&
      immortal.body?.message === 'namespaces "default" is forbidden: this namespace may not be deleted', summary(immortal));
  },

  async 'events-v1'() {
    const group = await call(() => kc.makeApiClient(k8s.EventsApi).getAPIGroupWithHttpInfo());
    report('/apis/events.k8s.io is discovered', group.code === 200 && group.body?.name === 'events.k8s.io', summary(group));
    // A MicroTime has six digits: kube-apiserver refuses the three of a
    // JavaScript Date (the client sends a string as it is).
    const micro = (d) => d.toISOString().replace(/Z$/, '000Z');
    const event = (name, extra) => ({
      metadata: { name },
      eventTime: micro(new Date()),
      reportingController: 'js.example/elector',
      reportingInstance: 'js-1',
      action: 'Elect',
      reason: 'LeaderElection',
      type: 'Normal',
      note: 'js-1 became leader',
      regarding: { apiVersion: 'coordination.k8s.io/v1', kind: 'Lease', name: 'x', namespace: ns },
      ...extra,
    });
    const created = await call(() => eventsV1.createNamespacedEventWithHttpInfo({ namespace: ns, body: event('ev1') }));
    report('an events.k8s.io/v1 Event is created', created.code === 201 && created.body?.note === 'js-1 became leader', summary(created));
    const asCore = await call(() => core.readNamespacedEventWithHttpInfo({ name: 'ev1', namespace: ns }));
    report('core/v1 reads it', asCore.code === 200 && asCore.body?.message === 'js-1 became leader' &&
      asCore.body?.involvedObject?.name === 'x', summary(asCore));
    const series = await call(() => eventsV1.patchNamespacedEventWithHttpInfo({
      name: 'ev1', namespace: ns, body: { series: { count: 2, lastObservedTime: micro(new Date()) } },
    }, as(k8s.PatchStrategy.StrategicMergePatch)));
    report('its series is patched as a repeating recorder patches it', series.code === 200 && series.body?.series?.count === 2, summary(series));
    const invalid = await call(() => eventsV1.createNamespacedEventWithHttpInfo({
      namespace: ns, body: event('ev2', { reportingController: undefined }),
    }));
    report('an events.k8s.io/v1 Event without reportingController is 422', invalid.code === 422 &&
      invalid.body?.message?.startsWith('Event "ev2" is invalid: [reportingController: Required value, ' +
        'reportingController: Invalid value: "": name part must be non-empty'), summary(invalid));
  },

  async 'event-patch'() {
    const now = new Date();
    const created = await call(() => core.createNamespacedEventWithHttpInfo({ namespace: ns, body: {
      metadata: { name: 'ce1' },
      involvedObject: { kind: 'Lease', name: 'x', namespace: ns },
      reason: 'LeaderElection', message: 'js-1 became leader', type: 'Normal',
      count: 1, firstTimestamp: now, lastTimestamp: now, source: { component: 'js' },
    } }));
    report('a core/v1 Event is created', created.code === 201, summary(created));
    const patched = await call(() => core.patchNamespacedEventWithHttpInfo({
      name: 'ce1', namespace: ns, body: { count: 2, lastTimestamp: new Date() },
    }, as(k8s.PatchStrategy.StrategicMergePatch)));
    report('PATCH of a core/v1 Event', patched.code === 200 && patched.body?.count === 2, summary(patched));
  },

  async 'deletecollection'() {
    await createLease('dc-1', 'a', { app: 'x' });
    await createLease('dc-2', 'a', { app: 'x' });
    await createLease('dc-3', 'a');
    const r = await call(() => coord.deleteCollectionNamespacedLeaseWithHttpInfo({ namespace: ns, labelSelector: 'app=x' }));
    report('DELETE of the leases collection', r.code === 200, summary(r));
    const left = await call(() => coord.listNamespacedLeaseWithHttpInfo({ namespace: ns }));
    const names = (left.body?.items ?? []).map((l) => l.metadata.name);
    report('only the selected leases are gone', JSON.stringify(names) === JSON.stringify(['dc-3']), names);
  },

  async 'dry-run'() {
    const r = await call(() => coord.createNamespacedLeaseWithHttpInfo({ namespace: ns, body: lease('dry', 'a'), dryRun: 'All' }));
    report('create with dryRun=All is 201', r.code === 201 && r.body?.metadata?.name === 'dry', summary(r));
    const after = await readLease('dry');
    report('and stores nothing', after.code === 404, summary(after));
  },

  async 'refusals'() {
    await createLease('pr', 'a');
    const r = await call(() => coord.replaceNamespacedLeaseWithHttpInfo({ name: 'pr', namespace: ns, body: lease('pr', 'b') }));
    report('PUT of a lease without resourceVersion is 422', r.code === 422 && r.body?.message ===
      'leases.coordination.k8s.io "pr" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update', summary(r));
    const objects = k8s.KubernetesObjectApi.makeApiClient(kc);
    const body = lease('nu', null);
    body.metadata.namespace = ns;
    body.metadata.labels = { app: 'x' };
    body.metadata.annotations = null;
    body.spec.bogus = 1;
    const created = await objects.create(body);
    report('explicit nulls are not stored',
      created.spec.holderIdentity === undefined && created.metadata.annotations === undefined, created);
  },
};

const run = scenarios[scenario];
if (!run) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
await run();
