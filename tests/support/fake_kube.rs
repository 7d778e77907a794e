//! An in-process fake Kubernetes API server that speaks the real list/watch protocol
//! well enough to drive `kube::Api` and `kube::runtime::watcher` in tests.
//!
//! What it serves (plain HTTP/1.1 on `127.0.0.1`, JSON only):
//!
//! | resource | paths |
//! |---|---|
//! | core/v1 `pods` | `/api/v1/pods`, `/api/v1/namespaces/{ns}/pods[/{name}]` |
//! | core/v1 `namespaces` (cluster-scoped) | `/api/v1/namespaces[/{name}]` |
//! | batch/v1 `jobs`, `cronjobs` | `/apis/batch/v1/{plural}`, `/apis/batch/v1/namespaces/{ns}/{plural}[/{name}]` |
//! | coordination.k8s.io/v1 `leases` | `/apis/coordination.k8s.io/v1/leases`, `.../namespaces/{ns}/leases[/{name}]` |
//! | version | `GET /version` |
//!
//! Protocol implemented, as kube 5 sends it (`kube-core` `request.rs` / `params.rs`,
//! `kube-runtime` `watcher.rs`):
//!
//! - **LIST** (`GET` a collection): `limit` + `continue` pagination over a consistent
//!   snapshot (the continue token pins the first page's resourceVersion, so writes between
//!   pages do not show up), `remainingItemCount` when there is no selector,
//!   `resourceVersion` absent / `"0"` / `N` with `resourceVersionMatch` `NotOlderThan`
//!   (default) or `Exact` (an exact snapshot, rebuilt from the change history).
//!   Items are served without `apiVersion`/`kind`, like the apiserver; the list carries
//!   `kind: {Kind}List`. A continue token or an `Exact` version older than [`FakeKube::compact`]
//!   is `410 Expired`; a version from the future is `504 Timeout`.
//! - **WATCH** (`watch=true`): newline-delimited `{"type":…,"object":…}` events on a chunked
//!   `200` response. `resourceVersion` absent or `"0"` starts with synthetic `ADDED` events for
//!   the current state; `N` replays every change after `N` and continues live (so a client
//!   that re-watches from its last version loses nothing); `N` older than the compaction
//!   point gets one `ERROR` event with a `410 Expired` Status and the stream ends.
//!   `sendInitialEvents=true` (streaming lists) sends the current state then a `BOOKMARK`
//!   annotated `k8s.io/initial-events-end`. `allowWatchBookmarks` is honoured by
//!   [`FakeKube::send_bookmarks`]. `timeoutSeconds` ends the stream normally when it elapses.
//!   Objects in events carry `apiVersion`/`kind`; a `DELETED` event carries the final object
//!   with the deletion's resourceVersion.
//! - **Selectors** on lists and watches: `labelSelector` with `=`, `==`, `!=`, `in (…)`,
//!   `notin (…)`, `key`, `!key`; `fieldSelector` with `=`, `==`, `!=` on `metadata.name`,
//!   `metadata.namespace` and the few fields the apiserver indexes for these kinds (pods:
//!   `spec.nodeName`, `spec.restartPolicy`, `spec.schedulerName`, `spec.serviceAccountName`,
//!   `status.phase`, `status.podIP`; namespaces: `status.phase`; jobs: `status.successful`).
//!   Any other field label is `400 BadRequest`, as on a real cluster. A watch with a selector
//!   sees an object entering the selection as `ADDED` and leaving it as `DELETED`.
//! - **Writes** on every served resource: `POST` create (`409 AlreadyExists`), `GET` one,
//!   `PUT` replace with optimistic concurrency (`409 Conflict` when `metadata.resourceVersion`
//!   or `metadata.uid` differs from the stored one; leases, like the apiserver, refuse an
//!   update without a resourceVersion with `422 Invalid` and create on `PUT` when missing),
//!   `PATCH` with `application/merge-patch+json` (strategic merge is treated as a JSON merge
//!   patch, which is exact for leases), `DELETE` with `preconditions` (answers a `Success`
//!   Status). Every stored object gets `metadata.resourceVersion` (one global counter),
//!   `metadata.uid` (a deterministic UUID v4 string), `metadata.creationTimestamp`, and
//!   `metadata.generation` for pods, jobs and cron jobs (bumped when `spec` changes). A write
//!   that changes nothing is a no-op: no new resourceVersion, no event.
//! - Every error is a `Status` body with the apiserver's `reason` and `code`; unknown paths
//!   are `404 NotFound`.
//! - **Failure injection and recording** (for `kubefacts cleaner`): [`FakeKube::forbid`]
//!   answers a namespace's requests of one verb `403 Forbidden` as RBAC does,
//!   [`FakeKube::fail_requests`] answers them with any status (5xx, 429) for a number of
//!   requests or for ever, [`FakeKube::recreate_after_get`] replaces a Job by a same-named one
//!   with a new UID right after answering its `GET` (a re-creation racing the cleaner),
//!   [`FakeKube::hold_delete_responses_after`] applies later `DELETE`s but withholds their
//!   answers (a client killed between the deletion and its response), and
//!   [`FakeKube::delete_requests`] lists every `DELETE` received, with its preconditions,
//!   propagation policy and the status answered.
//!
//! Deliberately not implemented: discovery (`/api`, `/apis`; kube's `Api<K>` does not need
//! it), protobuf and table output, metadata-only (`PartialObjectMetadata`) responses (full
//! objects are served), server-side apply and JSON patch (`415`), `dryRun` (`400`),
//! `generateName`, subresources (`/status`, `/log`, …), `deletecollection`, graceful deletion,
//! finalizers, garbage collection and namespace cascade (a delete removes the object at once),
//! the legacy `/watch/` path prefix, periodic bookmarks (call [`FakeKube::send_bookmarks`]),
//! admission and schema validation (any JSON of the right `apiVersion`/`kind` is stored).

use std::{
    collections::{BTreeMap, HashMap},
    convert::Infallible,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll},
    time::{Duration, Instant},
};

use http_body_util::{BodyExt, Full, combinators::UnsyncBoxBody};
use hyper::{
    Method, Request, Response, StatusCode,
    body::{Bytes, Frame, Incoming},
    header,
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use serde_json::{Map, Value, json};
use tokio::{
    net::TcpListener,
    sync::mpsc,
    task::{JoinHandle, JoinSet},
    time::Sleep,
};

/// One kind of object the fake serves.
#[derive(Debug)]
struct Resource {
    /// API group, empty for core.
    group: &'static str,
    /// `apiVersion` of objects of this kind.
    api_version: &'static str,
    /// Lower-case plural used in paths and counters.
    plural: &'static str,
    /// `kind` of objects.
    kind: &'static str,
    /// Lives in a namespace.
    namespaced: bool,
    /// The apiserver maintains `metadata.generation`.
    generation: bool,
    /// `PUT` without `metadata.resourceVersion` is allowed.
    unconditional_update: bool,
    /// `PUT` on a missing object creates it.
    create_on_update: bool,
    /// Field labels usable in a `fieldSelector`, besides `metadata.name`/`metadata.namespace`.
    fields: &'static [&'static str],
}

impl Resource {
    /// `leases.coordination.k8s.io`, or `pods` for the core group.
    fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// `Lease.coordination.k8s.io`, or `Pod` for the core group, as in `Invalid` messages.
    fn qualified_kind(&self) -> String {
        if self.group.is_empty() { self.kind.to_string() } else { format!("{}.{}", self.kind, self.group) }
    }
}

const RESOURCES: [Resource; 5] = [
    Resource {
        group: "",
        api_version: "v1",
        plural: "pods",
        kind: "Pod",
        namespaced: true,
        generation: true,
        unconditional_update: true,
        create_on_update: false,
        fields: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "status.phase",
            "status.podIP",
        ],
    },
    Resource {
        group: "",
        api_version: "v1",
        plural: "namespaces",
        kind: "Namespace",
        namespaced: false,
        generation: false,
        unconditional_update: true,
        create_on_update: false,
        fields: &["status.phase"],
    },
    Resource {
        group: "batch",
        api_version: "batch/v1",
        plural: "jobs",
        kind: "Job",
        namespaced: true,
        generation: true,
        unconditional_update: true,
        create_on_update: false,
        fields: &["status.successful"],
    },
    Resource {
        group: "batch",
        api_version: "batch/v1",
        plural: "cronjobs",
        kind: "CronJob",
        namespaced: true,
        generation: true,
        unconditional_update: true,
        create_on_update: false,
        fields: &[],
    },
    Resource {
        group: "coordination.k8s.io",
        api_version: "coordination.k8s.io/v1",
        plural: "leases",
        kind: "Lease",
        namespaced: true,
        generation: false,
        unconditional_update: false,
        create_on_update: true,
        fields: &[],
    },
];

/// Index into [`RESOURCES`].
type Rid = usize;

fn rid_of_kind(kind: &str) -> Rid {
    RESOURCES
        .iter()
        .position(|r| r.kind == kind)
        .unwrap_or_else(|| panic!("FakeKube does not serve kind {kind:?}"))
}

fn rid_of_plural(plural: &str) -> Rid {
    RESOURCES.iter().position(|r| r.plural == plural).unwrap_or_else(|| {
        panic!("FakeKube does not serve resource {plural:?} (use the plural, e.g. \"jobs\")")
    })
}

/// A Kubernetes API server in this process, listening on `127.0.0.1:{random port}`.
///
/// Tests change cluster state with [`apply`](Self::apply) / [`delete`](Self::delete) and
/// inject the apiserver's failure modes with [`expire_watches`](Self::expire_watches),
/// [`close_watches`](Self::close_watches), [`compact`](Self::compact) and
/// [`set_down`](Self::set_down). Dropping it stops the server and every connection.
#[derive(Debug)]
pub struct FakeKube {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    server: JoinHandle<()>,
}

impl Drop for FakeKube {
    fn drop(&mut self) {
        self.server.abort();
    }
}

impl FakeKube {
    /// Binds `127.0.0.1:0` and serves until dropped.
    pub async fn start() -> FakeKube {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("FakeKube: bind 127.0.0.1:0");
        let addr = listener.local_addr().expect("FakeKube: local address");
        let state = Arc::new(Mutex::new(State::default()));
        let server = tokio::spawn(serve(listener, state.clone()));
        FakeKube { addr, state, server }
    }

    /// Base URL, e.g. `http://127.0.0.1:40123`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Writes a kubeconfig file for this server (no credentials) to `path`, for a
    /// `kubefacts` process started with `--kubeconfig`.
    pub fn write_kubeconfig(&self, path: &std::path::Path) {
        std::fs::write(
            path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n\
                 users:\n- name: u\n  user: {{}}\ncontexts:\n- name: c\n  context:\n    cluster: fake\n    user: u\n\
                 current-context: c\n",
                self.url()
            ),
        )
        .unwrap();
    }

    /// A kube config for this server with kube's production defaults, including the
    /// client's retry of `429`/`503`/`504` with exponential backoff (up to 15 attempts).
    pub fn config(&self) -> kube::Config {
        kube::Config::new(self.url().parse().expect("FakeKube: URL parses as a URI"))
    }

    /// A client for this server with kube's request retries turned off, so that a `503`
    /// from [`set_down`](Self::set_down) reaches the caller at once. Build a client from
    /// [`config`](Self::config) to exercise kube's own retries.
    pub fn client(&self) -> kube::Client {
        let mut config = self.config();
        config.default_retry = false;
        kube::Client::try_from(config).expect("FakeKube: build kube client")
    }

    /// Creates or replaces an object, found by its `apiVersion`/`kind`, namespace and name,
    /// and tells matching open watches (`ADDED` or `MODIFIED`). Fills in
    /// `metadata.resourceVersion`, `uid`, `creationTimestamp` (and `generation` where the
    /// apiserver keeps one); an update keeps the stored `uid` and `creationTimestamp`.
    /// An apply that changes nothing writes nothing (same resourceVersion, no event), as on
    /// the apiserver. Returns the stored object.
    ///
    /// Panics on a kind the fake does not serve, a mismatched `apiVersion`, a missing name,
    /// or a namespaced object without `metadata.namespace`.
    pub fn apply(&self, obj: Value) -> Value {
        let kind = obj["kind"].as_str().unwrap_or_else(|| panic!("apply: object has no kind: {obj}"));
        let rid = rid_of_kind(kind);
        let res = &RESOURCES[rid];
        assert_eq!(obj["apiVersion"], res.api_version, "apply: wrong apiVersion for {kind}: {obj}");
        let name = obj["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| panic!("apply: object has no metadata.name: {obj}"))
            .to_string();
        let namespace = match (res.namespaced, obj["metadata"]["namespace"].as_str()) {
            (true, Some(ns)) if !ns.is_empty() => ns.to_string(),
            (true, _) => panic!("apply: namespaced {kind} {name:?} needs metadata.namespace"),
            (false, _) => String::new(),
        };
        self.lock().commit(rid, namespace, name, obj)
    }

    /// Deletes an object (`kind` as in `"Job"`) and tells matching open watches (`DELETED`,
    /// carrying the object with the deletion's resourceVersion). Returns that object, or
    /// `None` when there was none.
    #[must_use = "None means nothing was deleted"]
    pub fn delete(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rid = rid_of_kind(kind);
        let namespace = scope(rid, namespace);
        self.lock().remove(rid, namespace, name)
    }

    /// The stored object, as a `GET` would return it.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let rid = rid_of_kind(kind);
        let namespace = scope(rid, namespace);
        self.lock().objects.get(&(rid, namespace, name.to_string())).cloned()
    }

    /// Sends an `ERROR` event with a `410 Expired` Status on every open watch and ends it,
    /// as the apiserver does when a watcher falls out of its watch window: the client must
    /// list again. (Versions stay valid; see [`compact`](Self::compact) for that.)
    pub fn expire_watches(&self) {
        let mut state = self.lock();
        let rv = state.rv;
        for watch in state.watches.drain(..) {
            let status = status_json(
                410,
                "Expired",
                &format!("too old resource version: {} ({rv})", watch.from_rv),
                None,
            );
            let _ = watch.tx.send(event_line("ERROR", &status));
        }
    }

    /// Ends every open watch stream normally (as on `timeoutSeconds` or an apiserver
    /// restart); a client resumes from its last resourceVersion without listing.
    pub fn close_watches(&self) {
        self.lock().watches.clear();
    }

    /// Makes every resourceVersion older than the current one unusable, like an etcd
    /// compaction: a later `WATCH` from an older version gets a `410 Expired` `ERROR` event,
    /// and an `Exact` list or a continue token from before it gets a `410` response.
    pub fn compact(&self) {
        let mut state = self.lock();
        state.compacted_below = state.rv;
    }

    /// Sends a `BOOKMARK` at the current resourceVersion on every open watch that asked for
    /// bookmarks (`allowWatchBookmarks=true`).
    pub fn send_bookmarks(&self) {
        let mut state = self.lock();
        let rv = state.rv;
        state.watches.retain(|w| {
            !w.bookmarks || w.tx.send(event_line("BOOKMARK", &bookmark(w.rid, rv, false))).is_ok()
        });
    }

    /// While down, every request is answered `503 ServiceUnavailable` with a Status body;
    /// going down also ends every open watch, as a dying apiserver would.
    pub fn set_down(&self, down: bool) {
        let mut state = self.lock();
        state.down = down;
        if down {
            state.watches.clear();
        }
    }

    /// LIST requests received for `plural` (e.g. `"jobs"`), one per page, including those
    /// answered `503` while down.
    pub fn lists(&self, plural: &str) -> usize {
        let rid = rid_of_plural(plural);
        self.lock().lists.get(&rid).copied().unwrap_or(0)
    }

    /// WATCH requests received for `plural` (e.g. `"jobs"`), including those answered `503`.
    pub fn watches(&self, plural: &str) -> usize {
        let rid = rid_of_plural(plural);
        self.lock().watch_requests.get(&rid).copied().unwrap_or(0)
    }

    /// Watch streams currently open (whose client has not gone away).
    pub fn open_watches(&self) -> usize {
        let mut state = self.lock();
        state.watches.retain(|w| !w.tx.is_closed());
        state.watches.len()
    }

    /// Answers the next `times` requests (`None`: every request) of `verb` (`get`, `list`,
    /// `watch`, `create`, `update`, `patch`, `delete`, or `*` for all) in `namespace` with
    /// `code` and a Status body (`InternalError` for 500, `ServiceUnavailable` for 503,
    /// `Timeout` for 504, `TooManyRequests` for 429, `Forbidden` for 403), before anything
    /// is read or written. Injections are checked in the order they were added.
    pub fn fail_requests(&self, namespace: &str, verb: &str, code: u16, times: Option<u32>) {
        assert!(
            matches!(code, 403 | 429 | 500 | 502 | 503 | 504),
            "fail_requests: FakeKube injects 403, 429, 500, 502, 503 or 504, not {code}"
        );
        assert!(
            matches!(verb, "*" | "get" | "list" | "watch" | "create" | "update" | "patch" | "delete"),
            "fail_requests: unknown verb {verb:?}"
        );
        self.lock().injections.push(Injection {
            namespace: namespace.to_string(),
            verb: verb.to_string(),
            code,
            remaining: times,
        });
    }

    /// RBAC says no: every request of `verb` (or `*`) in `namespace` is `403 Forbidden`,
    /// with the apiserver's message naming the user, verb and resource.
    pub fn forbid(&self, namespace: &str, verb: &str) {
        self.fail_requests(namespace, verb, 403, None);
    }

    /// After answering the next successful `GET` of Job `namespace/name`, deletes it and
    /// creates a Job with the same name and content but a new UID: a re-creation between a
    /// client's read and its write. One-shot.
    pub fn recreate_after_get(&self, namespace: &str, name: &str) {
        self.lock().recreate_after_get.push((namespace.to_string(), name.to_string()));
    }

    /// `DELETE` requests after the first `n` are still carried out, but their responses
    /// are withheld until [`release_delete_responses`](Self::release_delete_responses) (or
    /// until the server is dropped): a client killed there has deleted without knowing it.
    pub fn hold_delete_responses_after(&self, n: usize) {
        self.lock().hold_deletes_after = Some(n);
    }

    /// Answers the withheld `DELETE` responses and stops withholding.
    pub fn release_delete_responses(&self) {
        self.lock().hold_deletes_after = None;
    }

    /// Every `DELETE` request received so far, in arrival order, whatever it was answered
    /// (including injected failures and `503`s while down).
    pub fn delete_requests(&self) -> Vec<DeleteRequest> {
        self.lock().deletes.clone()
    }

    /// The current (latest) resourceVersion.
    pub fn resource_version(&self) -> String {
        self.lock().rv.to_string()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One `DELETE` request as [`FakeKube::delete_requests`] recorded it.
#[derive(Debug, Clone)]
pub struct DeleteRequest {
    /// Resource plural, e.g. `jobs`.
    pub plural: &'static str,
    /// Namespace (empty for cluster-scoped kinds).
    pub namespace: String,
    /// Object name.
    pub name: String,
    /// `preconditions.uid` of the DeleteOptions body.
    pub precondition_uid: Option<String>,
    /// `propagationPolicy` of the body (or of the query, as kubectl may send it).
    pub propagation_policy: Option<String>,
    /// The DeleteOptions body (`null` when empty or not JSON).
    pub body: Value,
    /// HTTP status answered.
    pub code: u16,
    /// When it arrived.
    pub at: Instant,
}

/// A failure injected by [`FakeKube::fail_requests`].
#[derive(Debug)]
struct Injection {
    namespace: String,
    verb: String,
    code: u16,
    remaining: Option<u32>,
}

/// The namespace key of an object of `rid`: empty for cluster-scoped kinds.
fn scope(rid: Rid, namespace: Option<&str>) -> String {
    match (RESOURCES[rid].namespaced, namespace) {
        (true, Some(ns)) => ns.to_string(),
        (true, None) => panic!("{} are namespaced: pass a namespace", RESOURCES[rid].plural),
        (false, _) => String::new(),
    }
}

// ---------------------------------------------------------------------------------------
// Server plumbing

type Body = UnsyncBoxBody<Bytes, Infallible>;

async fn serve(listener: TcpListener, state: Arc<Mutex<State>>) {
    // Dropping the set (when the server task is aborted) aborts every connection.
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let state = state.clone();
        connections.spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, Infallible>(handle(&state, req).await) }
            });
            let _ = http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn handle(state: &Mutex<State>, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    let content_type = parts.headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    let query = Query::parse(parts.uri.query().unwrap_or(""));
    // Never held across an await: everything after the body is read is synchronous.
    let (response, hold) = state.lock().unwrap_or_else(PoisonError::into_inner).respond(
        &parts.method,
        parts.uri.path(),
        &query,
        content_type,
        &body,
    );
    // A withheld DELETE response waits (without the lock) until released.
    while hold && state.lock().unwrap_or_else(PoisonError::into_inner).hold_deletes_after.is_some() {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    response
}

/// A watch response body: event lines from the channel until it closes or the
/// `timeoutSeconds` deadline passes.
struct WatchBody {
    rx: mpsc::UnboundedReceiver<Bytes>,
    deadline: Pin<Box<Sleep>>,
}

impl hyper::body::Body for WatchBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(line)) => Poll::Ready(Some(Ok(Frame::data(line)))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => self.deadline.as_mut().poll(cx).map(|()| None),
        }
    }
}

fn json_response(code: StatusCode, body: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(body).expect("JSON serialises");
    Response::builder()
        .status(code)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(bytes)).boxed_unsync())
        .expect("valid response")
}

// ---------------------------------------------------------------------------------------
// Errors

/// An apiserver error, answered as a `Status` body.
#[derive(Debug)]
struct Failure {
    code: u16,
    reason: &'static str,
    message: String,
    details: Option<Value>,
}

impl Failure {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        Failure { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    fn about(self, rid: Rid, name: &str) -> Self {
        let res = &RESOURCES[rid];
        let mut details = json!({ "name": name, "kind": res.plural });
        if !res.group.is_empty() {
            details["group"] = json!(res.group);
        }
        self.with_details(details)
    }

    fn bad_request(message: impl Into<String>) -> Self {
        Failure::new(400, "BadRequest", message)
    }

    fn not_found(rid: Rid, name: &str) -> Self {
        Failure::new(404, "NotFound", format!("{} \"{name}\" not found", RESOURCES[rid].qualified()))
            .about(rid, name)
    }

    fn conflict(rid: Rid, name: &str, why: &str) -> Self {
        let what = RESOURCES[rid].qualified();
        Failure::new(409, "Conflict", format!("Operation cannot be fulfilled on {what} \"{name}\": {why}"))
            .about(rid, name)
    }

    fn invalid(rid: Rid, name: &str, field_error: &str) -> Self {
        let what = RESOURCES[rid].qualified_kind();
        Failure::new(422, "Invalid", format!("{what} \"{name}\" is invalid: {field_error}")).about(rid, name)
    }

    fn response(self) -> Response<Body> {
        let body = status_json(self.code, self.reason, &self.message, self.details);
        json_response(StatusCode::from_u16(self.code).expect("valid status code"), &body)
    }
}

fn status_json(code: u16, reason: &str, message: &str, details: Option<Value>) -> Value {
    let mut status = json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    });
    if let Some(details) = details {
        status["details"] = details;
    }
    status["code"] = json!(code);
    status
}

// ---------------------------------------------------------------------------------------
// Requests

/// Decoded query parameters.
#[derive(Debug, Default)]
struct Query(Vec<(String, String)>);

impl Query {
    fn parse(query: &str) -> Query {
        Query(
            query
                .split('&')
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').unwrap_or((p, ""));
                    (percent_decode(k), percent_decode(v))
                })
                .collect(),
        )
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    fn is_true(&self, key: &str) -> bool {
        matches!(self.get(key), Some("true" | "1"))
    }
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// What a path names.
#[derive(Debug, PartialEq)]
enum Target {
    Version,
    Collection { rid: Rid, namespace: Option<String> },
    Item { rid: Rid, namespace: String, name: String },
}

fn route(path: &str) -> Option<Target> {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, version, rest) = match segments.as_slice() {
        ["version"] => return Some(Target::Version),
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return None,
    };
    let find = |plural: &str| {
        RESOURCES.iter().position(|r| {
            r.group == group && r.plural == plural && r.api_version.rsplit('/').next() == Some(version)
        })
    };
    match rest {
        ["namespaces", ns, plural, more @ ..] if more.len() <= 1 => {
            let rid = find(plural).filter(|rid| RESOURCES[*rid].namespaced)?;
            match more {
                [] => Some(Target::Collection { rid, namespace: Some(ns.to_string()) }),
                [name] => Some(Target::Item { rid, namespace: ns.to_string(), name: name.to_string() }),
                _ => None,
            }
        }
        [plural] => Some(Target::Collection { rid: find(plural)?, namespace: None }),
        [plural, name] => {
            let rid = find(plural).filter(|rid| !RESOURCES[*rid].namespaced)?;
            Some(Target::Item { rid, namespace: String::new(), name: name.to_string() })
        }
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// Selectors

/// One `labelSelector` requirement.
#[derive(Debug, Clone)]
enum LabelReq {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    NotExists(String),
}

/// `labelSelector` + `fieldSelector` of a list or watch.
#[derive(Debug, Clone, Default)]
struct Selector {
    labels: Vec<LabelReq>,
    /// `(field label, equal?, value)`.
    fields: Vec<(String, bool, String)>,
}

impl Selector {
    fn parse(rid: Rid, query: &Query) -> Result<Selector, Failure> {
        let labels = match query.get("labelSelector") {
            Some(s) => parse_labels(s)
                .map_err(|e| Failure::bad_request(format!("unable to parse requirement: {e}")))?,
            None => Vec::new(),
        };
        let mut fields = Vec::new();
        for term in
            query.get("fieldSelector").unwrap_or("").split(',').map(str::trim).filter(|t| !t.is_empty())
        {
            let (key, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(Failure::bad_request(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                )));
            };
            let key = key.trim();
            if !matches!(key, "metadata.name" | "metadata.namespace") && !RESOURCES[rid].fields.contains(&key)
            {
                // The apiserver's own words.
                return Err(Failure::bad_request(format!("field label not supported: {key}")));
            }
            fields.push((key.to_string(), eq, value.trim().to_string()));
        }
        Ok(Selector { labels, fields })
    }

    fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        let label = |k: &str| labels.get(k).and_then(Value::as_str);
        let labels_ok = self.labels.iter().all(|req| match req {
            LabelReq::In(k, vs) => label(k).is_some_and(|v| vs.iter().any(|x| x == v)),
            LabelReq::NotIn(k, vs) => label(k).is_none_or(|v| vs.iter().all(|x| x != v)),
            LabelReq::Exists(k) => label(k).is_some(),
            LabelReq::NotExists(k) => label(k).is_none(),
        });
        labels_ok && self.fields.iter().all(|(path, eq, want)| (field_value(obj, path) == *want) == *eq)
    }
}

/// A field label's value as the apiserver compares it: scalars as strings, missing as "".
fn field_value(obj: &Value, path: &str) -> String {
    match path.split('.').fold(obj, |v, k| &v[k]) {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn parse_labels(selector: &str) -> Result<Vec<LabelReq>, String> {
    // Split on commas outside parentheses.
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0i32, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                terms.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&selector[start..]);
    let key = |k: &str| {
        let k = k.trim();
        if k.is_empty() || k.contains(char::is_whitespace) {
            Err(format!("invalid label key {k:?}"))
        } else {
            Ok(k.to_string())
        }
    };
    let mut reqs = Vec::new();
    for term in terms.into_iter().map(str::trim).filter(|t| !t.is_empty()) {
        let req = if let Some((head, tail)) = term.split_once('(') {
            let values = tail
                .strip_suffix(')')
                .ok_or_else(|| format!("{term:?}: missing ')'"))?
                .split(',')
                .map(|v| v.trim().to_string())
                .collect();
            match head.split_whitespace().collect::<Vec<_>>().as_slice() {
                [k, "in"] => LabelReq::In(key(k)?, values),
                [k, "notin"] => LabelReq::NotIn(key(k)?, values),
                _ => return Err(format!("{term:?}: expected 'key in (…)' or 'key notin (…)'")),
            }
        } else if let Some(k) = term.strip_prefix('!') {
            LabelReq::NotExists(key(k)?)
        } else if let Some((k, v)) = term.split_once("!=") {
            LabelReq::NotIn(key(k)?, vec![v.trim().to_string()])
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            LabelReq::In(key(k)?, vec![v.trim().to_string()])
        } else if term.contains(['<', '>']) {
            return Err(format!("{term:?}: gt/lt selectors are not supported by FakeKube"));
        } else {
            LabelReq::Exists(key(term)?)
        };
        reqs.push(req);
    }
    Ok(reqs)
}

// ---------------------------------------------------------------------------------------
// State

/// `(resource, namespace or "", name)`, ordered like etcd keys.
type Key = (Rid, String, String);

#[derive(Debug, Clone, Copy, PartialEq)]
enum ChangeType {
    Added,
    Modified,
    Deleted,
}

/// One write, kept to replay watches from a resourceVersion and to rebuild snapshots.
#[derive(Debug)]
struct Change {
    rv: u64,
    rid: Rid,
    namespace: String,
    name: String,
    kind: ChangeType,
    /// The object before a modification.
    old: Option<Value>,
    /// The object after the write; for a deletion, the final object.
    object: Value,
}

impl Change {
    /// The event a watch with `selector` sees for this change, if any.
    fn event_for(&self, selector: &Selector) -> Option<&'static str> {
        let now = selector.matches(&self.object);
        match self.kind {
            ChangeType::Added => now.then_some("ADDED"),
            ChangeType::Deleted => now.then_some("DELETED"),
            ChangeType::Modified => {
                let before = self.old.as_ref().is_some_and(|o| selector.matches(o));
                match (before, now) {
                    (false, true) => Some("ADDED"),
                    (true, true) => Some("MODIFIED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }
}

#[derive(Debug)]
struct OpenWatch {
    rid: Rid,
    namespace: Option<String>,
    selector: Selector,
    bookmarks: bool,
    /// The resourceVersion the client watched from (for error messages).
    from_rv: u64,
    tx: mpsc::UnboundedSender<Bytes>,
}

#[derive(Debug, Default)]
struct State {
    /// The latest resourceVersion; every write takes the next one.
    rv: u64,
    /// UIDs handed out so far.
    uids: u64,
    /// Versions below this are compacted away.
    compacted_below: u64,
    down: bool,
    objects: BTreeMap<Key, Value>,
    history: Vec<Change>,
    watches: Vec<OpenWatch>,
    lists: HashMap<Rid, usize>,
    watch_requests: HashMap<Rid, usize>,
    injections: Vec<Injection>,
    deletes: Vec<DeleteRequest>,
    hold_deletes_after: Option<usize>,
    recreate_after_get: Vec<(String, String)>,
}

fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({ "type": kind, "object": object })).expect("JSON serialises");
    line.push(b'\n');
    Bytes::from(line)
}

fn bookmark(rid: Rid, rv: u64, initial_events_end: bool) -> Value {
    let res = &RESOURCES[rid];
    let mut metadata = json!({ "resourceVersion": rv.to_string(), "creationTimestamp": null });
    if initial_events_end {
        metadata["annotations"] = json!({ "k8s.io/initial-events-end": "true" });
    }
    json!({ "kind": res.kind, "apiVersion": res.api_version, "metadata": metadata })
}

fn parse_rv(s: &str) -> Result<u64, Failure> {
    s.parse().map_err(|_| Failure::bad_request(format!("invalid resource version: {s:?}")))
}

impl State {
    /// The response, and whether to withhold it (a held `DELETE`). Every `DELETE` of an
    /// object is recorded with the status it got.
    fn respond(
        &mut self,
        method: &Method,
        path: &str,
        query: &Query,
        content_type: &str,
        body: &[u8],
    ) -> (Response<Body>, bool) {
        let response = self.answer(method, path, query, content_type, body);
        let Some(Target::Item { rid, namespace, name }) = route(path).filter(|_| method == Method::DELETE)
        else {
            return (response, false);
        };
        let body: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
        let propagation_policy =
            body["propagationPolicy"].as_str().or_else(|| query.get("propagationPolicy")).map(str::to_string);
        self.deletes.push(DeleteRequest {
            plural: RESOURCES[rid].plural,
            namespace,
            name,
            precondition_uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            propagation_policy,
            body,
            code: response.status().as_u16(),
            at: Instant::now(),
        });
        let hold = self.hold_deletes_after.is_some_and(|n| self.deletes.len() > n);
        (response, hold)
    }

    /// The first injected failure matching this request, if any (counting it down).
    fn injected(&mut self, target: &Option<Target>, method: &Method, query: &Query) -> Option<Failure> {
        let (rid, namespace, name) = match target {
            Some(Target::Collection { rid, namespace: Some(ns) }) => (*rid, ns.as_str(), None),
            Some(Target::Item { rid, namespace, name }) if !namespace.is_empty() => {
                (*rid, namespace.as_str(), Some(name.as_str()))
            }
            _ => return None,
        };
        let verb = match (method, name) {
            (&Method::GET, Some(_)) => "get",
            (&Method::GET, None) if query.is_true("watch") => "watch",
            (&Method::GET, None) => "list",
            (&Method::POST, _) => "create",
            (&Method::PUT, _) => "update",
            (&Method::PATCH, _) => "patch",
            (&Method::DELETE, _) => "delete",
            _ => return None,
        };
        let i = self.injections.iter().position(|inj| {
            inj.namespace == namespace && (inj.verb == "*" || inj.verb == verb) && inj.remaining != Some(0)
        })?;
        let inj = &mut self.injections[i];
        if let Some(n) = &mut inj.remaining {
            *n -= 1;
        }
        let res = &RESOURCES[rid];
        let what = match name {
            Some(name) => format!("{} \"{name}\"", res.qualified()),
            None => res.qualified(),
        };
        let failure = match inj.code {
            403 => Failure::new(
                403,
                "Forbidden",
                format!(
                    "{what} is forbidden: User \"system:serviceaccount:kubefacts:kubefacts-cleaner\" cannot \
                     {verb} resource \"{}\" in API group \"{}\" in the namespace \"{namespace}\"",
                    res.plural, res.group
                ),
            ),
            429 => Failure::new(429, "TooManyRequests", "the server has received too many requests"),
            503 => Failure::new(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request",
            ),
            504 => Failure::new(
                504,
                "Timeout",
                "the server was unable to return a response in the time allotted",
            ),
            code => Failure::new(
                code,
                "InternalError",
                "Internal error occurred: injected by FakeKube::fail_requests",
            ),
        };
        Some(match name {
            Some(name) => failure.about(rid, name),
            None => failure,
        })
    }

    /// Replaces a Job asked for by [`FakeKube::recreate_after_get`] by a new one.
    fn recreate_if_asked(&mut self, rid: Rid, namespace: &str, name: &str) {
        let Some(i) = self
            .recreate_after_get
            .iter()
            .position(|(ns, n)| ns == namespace && n == name)
            .filter(|_| RESOURCES[rid].kind == "Job")
        else {
            return;
        };
        self.recreate_after_get.remove(i);
        let Some(mut obj) = self.remove(rid, namespace.to_string(), name) else { return };
        if let Some(meta) = obj["metadata"].as_object_mut() {
            for field in ["uid", "resourceVersion", "creationTimestamp", "generation", "deletionTimestamp"] {
                meta.remove(field);
            }
        }
        self.commit(rid, namespace.to_string(), name.to_string(), obj);
    }

    fn answer(
        &mut self,
        method: &Method,
        path: &str,
        query: &Query,
        content_type: &str,
        body: &[u8],
    ) -> Response<Body> {
        let target = route(path);
        if let Some(Target::Collection { rid, .. }) = &target
            && method == Method::GET
        {
            let counter = if query.is_true("watch") { &mut self.watch_requests } else { &mut self.lists };
            *counter.entry(*rid).or_default() += 1;
        }
        if self.down {
            return Failure::new(
                503,
                "ServiceUnavailable",
                "the fake apiserver is down (FakeKube::set_down)",
            )
            .response();
        }
        let writes = matches!(*method, Method::POST | Method::PUT | Method::PATCH | Method::DELETE);
        if writes && query.get("dryRun").is_some() {
            return Failure::bad_request("FakeKube does not implement dryRun").response();
        }
        if let Some(failure) = self.injected(&target, method, query) {
            return failure.response();
        }
        let result = match (target, method) {
            (None, _) => {
                Err(Failure::new(404, "NotFound", "the server could not find the requested resource")
                    .with_details(json!({})))
            }
            (Some(Target::Version), &Method::GET) => Ok(json_response(StatusCode::OK, &version())),
            (Some(Target::Collection { rid, namespace }), &Method::GET) => {
                if query.is_true("watch") {
                    self.watch(rid, namespace, query)
                } else {
                    self.list(rid, namespace.as_deref(), query)
                }
            }
            (Some(Target::Collection { rid, namespace }), &Method::POST)
                if namespace.is_some() != RESOURCES[rid].namespaced =>
            {
                Err(method_not_allowed())
            }
            (Some(Target::Collection { rid, namespace }), &Method::POST) => {
                self.create(rid, namespace.unwrap_or_default(), body)
            }
            (Some(Target::Item { rid, namespace, name }), &Method::GET) => {
                let got = self
                    .objects
                    .get(&(rid, namespace.clone(), name.clone()))
                    .map(|o| json_response(StatusCode::OK, o))
                    .ok_or_else(|| Failure::not_found(rid, &name));
                if got.is_ok() {
                    self.recreate_if_asked(rid, &namespace, &name);
                }
                got
            }
            (Some(Target::Item { rid, namespace, name }), &Method::PUT) => {
                self.replace(rid, namespace, name, body)
            }
            (Some(Target::Item { rid, namespace, name }), &Method::PATCH) => {
                self.patch(rid, namespace, name, content_type, body)
            }
            (Some(Target::Item { rid, namespace, name }), &Method::DELETE) => {
                self.delete_request(rid, namespace, name, body)
            }
            _ => Err(method_not_allowed()),
        };
        result.unwrap_or_else(Failure::response)
    }

    /// The state of resource `rid` at resourceVersion `at`, keyed by `(namespace, name)`.
    fn snapshot(&self, rid: Rid, at: u64) -> BTreeMap<(String, String), Value> {
        if at >= self.rv {
            return self
                .objects
                .range((rid, String::new(), String::new())..(rid + 1, String::new(), String::new()))
                .map(|((_, ns, name), o)| ((ns.clone(), name.clone()), o.clone()))
                .collect();
        }
        let mut snapshot = BTreeMap::new();
        for change in self.history.iter().take_while(|c| c.rv <= at).filter(|c| c.rid == rid) {
            let key = (change.namespace.clone(), change.name.clone());
            if change.kind == ChangeType::Deleted {
                snapshot.remove(&key);
            } else {
                snapshot.insert(key, change.object.clone());
            }
        }
        snapshot
    }

    /// The resourceVersion a list without a continue token is served at.
    fn list_rv(&self, query: &Query) -> Result<u64, Failure> {
        let version_match = query.get("resourceVersionMatch");
        let rv = match query.get("resourceVersion").filter(|rv| !rv.is_empty()) {
            None if version_match.is_some() => {
                return Err(Failure::bad_request(
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                ));
            }
            None | Some("0") if version_match == Some("Exact") => {
                return Err(Failure::bad_request(
                    "resourceVersionMatch \"Exact\" is forbidden for resourceVersion \"0\"",
                ));
            }
            None | Some("0") => return Ok(self.rv),
            Some(rv) => parse_rv(rv)?,
        };
        if rv > self.rv {
            return Err(Failure::new(
                504,
                "Timeout",
                format!("Too large resource version: {rv}, current: {}", self.rv),
            )
            .with_details(json!({
                "causes": [{ "reason": "ResourceVersionTooLarge", "message": "Too large resource version" }],
                "retryAfterSeconds": 1
            })));
        }
        match version_match {
            Some("Exact") if rv < self.compacted_below => Err(Failure::new(
                410,
                "Expired",
                format!("too old resource version: {rv} ({})", self.compacted_below),
            )),
            Some("Exact") => Ok(rv),
            None | Some("NotOlderThan") => Ok(self.rv),
            Some(other) => Err(Failure::bad_request(format!("unknown resourceVersionMatch {other:?}"))),
        }
    }

    fn list(&self, rid: Rid, namespace: Option<&str>, query: &Query) -> Result<Response<Body>, Failure> {
        let res = &RESOURCES[rid];
        let selector = Selector::parse(rid, query)?;
        let limit = match query.get("limit") {
            Some(l) => {
                l.parse::<usize>().map_err(|_| Failure::bad_request(format!("invalid limit {l:?}")))?
            }
            None => 0,
        };
        let (at, after) = match query.get("continue").filter(|c| !c.is_empty()) {
            Some(token) => {
                let (rv, key) = parse_continue(token)?;
                if rv < self.compacted_below {
                    return Err(Failure::new(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list result. \
                         You can start a new list without the continue parameter.",
                    ));
                }
                (rv, Some(key))
            }
            None => (self.list_rv(query)?, None),
        };
        let mut items: Vec<((String, String), Value)> = self
            .snapshot(rid, at)
            .into_iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
            .filter(|(key, _)| after.as_ref().is_none_or(|after| key > after))
            .filter(|(_, obj)| selector.matches(obj))
            .collect();
        let mut metadata = json!({ "resourceVersion": at.to_string() });
        if limit > 0 && items.len() > limit {
            let remaining = items.len() - limit;
            items.truncate(limit);
            let (ns, name) = &items[limit - 1].0;
            metadata["continue"] = json!(format!("{at}/{ns}/{name}"));
            if selector.is_empty() {
                metadata["remainingItemCount"] = json!(remaining);
            }
        }
        let items: Vec<Value> = items
            .into_iter()
            .map(|(_, mut obj)| {
                // The apiserver leaves apiVersion/kind off list items.
                if let Some(map) = obj.as_object_mut() {
                    map.remove("apiVersion");
                    map.remove("kind");
                }
                obj
            })
            .collect();
        let list = json!({
            "kind": format!("{}List", res.kind),
            "apiVersion": res.api_version,
            "metadata": metadata,
            "items": items,
        });
        Ok(json_response(StatusCode::OK, &list))
    }

    fn watch(
        &mut self,
        rid: Rid,
        namespace: Option<String>,
        query: &Query,
    ) -> Result<Response<Body>, Failure> {
        let selector = Selector::parse(rid, query)?;
        let bookmarks = query.is_true("allowWatchBookmarks");
        let initial_events = query.is_true("sendInitialEvents");
        if initial_events && (!bookmarks || query.get("resourceVersionMatch") != Some("NotOlderThan")) {
            return Err(Failure::new(
                422,
                "Invalid",
                "sendInitialEvents requires allowWatchBookmarks=true and resourceVersionMatch=NotOlderThan",
            ));
        }
        let timeout_secs = match query.get("timeoutSeconds") {
            Some(t) => {
                t.parse::<u64>().map_err(|_| Failure::bad_request(format!("invalid timeoutSeconds {t:?}")))?
            }
            None => 1800,
        };
        let from = match query.get("resourceVersion").filter(|rv| !rv.is_empty() && *rv != "0") {
            Some(rv) => Some(parse_rv(rv)?),
            None => None,
        };
        let (tx, rx) = mpsc::unbounded_channel();
        let in_scope = |ns: &str| namespace.as_deref().is_none_or(|want| want == ns);
        let mut stays_open = true;
        match from {
            Some(from) if from < self.compacted_below => {
                let message = format!("too old resource version: {from} ({})", self.compacted_below);
                let _ = tx.send(event_line("ERROR", &status_json(410, "Expired", &message, None)));
                stays_open = false;
            }
            Some(from) if !initial_events => {
                for change in
                    self.history.iter().filter(|c| c.rv > from && c.rid == rid && in_scope(&c.namespace))
                {
                    if let Some(kind) = change.event_for(&selector) {
                        let _ = tx.send(event_line(kind, &change.object));
                    }
                }
            }
            _ => {
                // "Start at most recent" (rv unset/0) or a streaming list: the current state first.
                for ((ns, _), obj) in self.snapshot(rid, self.rv) {
                    if in_scope(&ns) && selector.matches(&obj) {
                        let _ = tx.send(event_line("ADDED", &obj));
                    }
                }
                if initial_events {
                    let _ = tx.send(event_line("BOOKMARK", &bookmark(rid, self.rv, true)));
                }
            }
        }
        // Once the sender is dropped the stream ends after what was queued.
        if stays_open {
            let from_rv = from.unwrap_or(self.rv);
            self.watches.push(OpenWatch { rid, namespace, selector, bookmarks, from_rv, tx });
        }
        let body =
            WatchBody { rx, deadline: Box::pin(tokio::time::sleep(Duration::from_secs(timeout_secs))) };
        Ok(Response::builder()
            .status(StatusCode::OK)
            .header(header::CONTENT_TYPE, "application/json")
            .body(body.boxed_unsync())
            .expect("valid response"))
    }

    /// Parses a write's body and checks it names the right kind, namespace and name.
    fn parse_object(
        &self,
        rid: Rid,
        namespace: &str,
        name: Option<&str>,
        body: &[u8],
    ) -> Result<(Value, String), Failure> {
        let res = &RESOURCES[rid];
        let obj: Value = serde_json::from_slice(body)
            .map_err(|e| Failure::bad_request(format!("invalid JSON body: {e}")))?;
        if !obj.is_object() {
            return Err(Failure::bad_request("the body must be a JSON object"));
        }
        for (field, want) in [("apiVersion", res.api_version), ("kind", res.kind)] {
            if let Some(got) = obj.get(field).and_then(Value::as_str)
                && got != want
            {
                return Err(Failure::bad_request(format!(
                    "{field} {got:?} does not match {want:?} of the path"
                )));
            }
        }
        let body_name = obj["metadata"]["name"].as_str().unwrap_or("");
        let obj_name = match name {
            Some(url_name) if !body_name.is_empty() && body_name != url_name => {
                return Err(Failure::bad_request(format!(
                    "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
                )));
            }
            Some(url_name) => url_name.to_string(),
            None if body_name.is_empty() => {
                return Err(Failure::invalid(
                    rid,
                    "",
                    "metadata.name: Required value: name or generateName is required",
                ));
            }
            None => body_name.to_string(),
        };
        if res.namespaced
            && let Some(ns) = obj["metadata"]["namespace"].as_str()
            && !ns.is_empty()
            && ns != namespace
        {
            return Err(Failure::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        Ok((obj, obj_name))
    }

    fn create(&mut self, rid: Rid, namespace: String, body: &[u8]) -> Result<Response<Body>, Failure> {
        let (obj, name) = self.parse_object(rid, &namespace, None, body)?;
        if self.objects.contains_key(&(rid, namespace.clone(), name.clone())) {
            let what = RESOURCES[rid].qualified();
            return Err(Failure::new(409, "AlreadyExists", format!("{what} \"{name}\" already exists"))
                .about(rid, &name));
        }
        let stored = self.commit(rid, namespace, name, obj);
        Ok(json_response(StatusCode::CREATED, &stored))
    }

    /// Checks `metadata.resourceVersion`/`uid` preconditions carried in `obj` (or a patch).
    fn check_preconditions(
        &self,
        rid: Rid,
        name: &str,
        stored: &Value,
        wanted: &Value,
    ) -> Result<(), Failure> {
        let wanted_rv = wanted["resourceVersion"].as_str().filter(|s| !s.is_empty());
        if let Some(rv) = wanted_rv
            && Some(rv) != stored["metadata"]["resourceVersion"].as_str()
        {
            return Err(Failure::conflict(
                rid,
                name,
                "the object has been modified; please apply your changes to the latest version and try again",
            ));
        }
        if let Some(uid) = wanted["uid"].as_str().filter(|s| !s.is_empty())
            && Some(uid) != stored["metadata"]["uid"].as_str()
        {
            let stored_uid = stored["metadata"]["uid"].as_str().unwrap_or("");
            return Err(Failure::conflict(
                rid,
                name,
                &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {stored_uid}"),
            ));
        }
        Ok(())
    }

    fn replace(
        &mut self,
        rid: Rid,
        namespace: String,
        name: String,
        body: &[u8],
    ) -> Result<Response<Body>, Failure> {
        let res = &RESOURCES[rid];
        let (obj, name) = self.parse_object(rid, &namespace, Some(&name), body)?;
        let Some(stored) = self.objects.get(&(rid, namespace.clone(), name.clone())) else {
            if res.create_on_update {
                let stored = self.commit(rid, namespace, name, obj);
                return Ok(json_response(StatusCode::CREATED, &stored));
            }
            return Err(Failure::not_found(rid, &name));
        };
        let has_rv = obj["metadata"]["resourceVersion"].as_str().is_some_and(|s| !s.is_empty());
        if !has_rv && !res.unconditional_update {
            return Err(Failure::invalid(
                rid,
                &name,
                "metadata.resourceVersion: Invalid value: 0: must be specified for an update",
            ));
        }
        self.check_preconditions(rid, &name, stored, &obj["metadata"])?;
        let stored = self.commit(rid, namespace, name, obj);
        Ok(json_response(StatusCode::OK, &stored))
    }

    fn patch(
        &mut self,
        rid: Rid,
        namespace: String,
        name: String,
        content_type: &str,
        body: &[u8],
    ) -> Result<Response<Body>, Failure> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        if !matches!(media, "application/merge-patch+json" | "application/strategic-merge-patch+json") {
            return Err(Failure::new(
                415,
                "UnsupportedMediaType",
                format!("FakeKube only implements merge patches, not {media:?}"),
            ));
        }
        let patch: Value = serde_json::from_slice(body)
            .map_err(|e| Failure::bad_request(format!("invalid JSON patch: {e}")))?;
        let stored = self
            .objects
            .get(&(rid, namespace.clone(), name.clone()))
            .ok_or_else(|| Failure::not_found(rid, &name))?;
        self.check_preconditions(rid, &name, stored, &patch["metadata"])?;
        let mut obj = stored.clone();
        merge_patch(&mut obj, &patch);
        let stored = self.commit(rid, namespace, name, obj);
        Ok(json_response(StatusCode::OK, &stored))
    }

    fn delete_request(
        &mut self,
        rid: Rid,
        namespace: String,
        name: String,
        body: &[u8],
    ) -> Result<Response<Body>, Failure> {
        let options: Value = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(body)
                .map_err(|e| Failure::bad_request(format!("invalid DeleteOptions: {e}")))?
        };
        let stored = self
            .objects
            .get(&(rid, namespace.clone(), name.clone()))
            .ok_or_else(|| Failure::not_found(rid, &name))?;
        self.check_preconditions(rid, &name, stored, &options["preconditions"])?;
        let deleted = self.remove(rid, namespace, &name).expect("object checked above");
        let mut details =
            json!({ "name": name, "kind": RESOURCES[rid].plural, "uid": deleted["metadata"]["uid"] });
        if !RESOURCES[rid].group.is_empty() {
            details["group"] = json!(RESOURCES[rid].group);
        }
        let status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "details": details,
        });
        Ok(json_response(StatusCode::OK, &status))
    }

    /// Stores `obj` as the new state of `(rid, namespace, name)` and tells watches.
    fn commit(&mut self, rid: Rid, namespace: String, name: String, obj: Value) -> Value {
        let res = &RESOURCES[rid];
        let key = (rid, namespace.clone(), name.clone());
        let old = self.objects.get(&key).cloned();
        let rv = self.rv + 1;
        let Value::Object(mut given) = obj else { panic!("commit: not a JSON object") };
        let mut meta = match given.remove("metadata") {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let old_meta = old.as_ref().map(|o| &o["metadata"]);
        meta.insert("name".into(), json!(name));
        if res.namespaced {
            meta.insert("namespace".into(), json!(namespace));
        } else {
            meta.remove("namespace");
        }
        let uid = match old_meta.map(|m| &m["uid"]) {
            Some(uid @ Value::String(_)) => uid.clone(),
            _ => match meta.get("uid") {
                Some(Value::String(u)) if !u.is_empty() => json!(u),
                _ => {
                    self.uids += 1;
                    json!(format!("00000000-0000-4000-8000-{:012x}", self.uids))
                }
            },
        };
        meta.insert("uid".into(), uid);
        meta.insert("resourceVersion".into(), json!(rv.to_string()));
        if res.generation && !meta.contains_key("generation") {
            let generation = match &old {
                Some(old) => {
                    let bumped = old["spec"] != *given.get("spec").unwrap_or(&Value::Null);
                    old["metadata"]["generation"].as_i64().unwrap_or(1) + i64::from(bumped)
                }
                None => 1,
            };
            meta.insert("generation".into(), json!(generation));
        }
        let created = match old_meta.map(|m| &m["creationTimestamp"]) {
            Some(ts @ Value::String(_)) => ts.clone(),
            _ => match meta.get("creationTimestamp") {
                Some(Value::String(ts)) => json!(ts),
                _ => json!(jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()),
            },
        };
        meta.insert("creationTimestamp".into(), created);
        // Real-shaped field order: kind, apiVersion, metadata, then the rest as given.
        let mut stored = Map::new();
        stored.insert("kind".into(), json!(res.kind));
        stored.insert("apiVersion".into(), json!(res.api_version));
        stored.insert("metadata".into(), Value::Object(meta));
        for (k, v) in given {
            if k != "kind" && k != "apiVersion" {
                stored.insert(k, v);
            }
        }
        let mut stored = Value::Object(stored);
        if let Some(old) = &old {
            // An update that changes nothing writes nothing: same version, no event.
            stored["metadata"]["resourceVersion"] = old["metadata"]["resourceVersion"].clone();
            if stored == *old {
                return stored;
            }
            stored["metadata"]["resourceVersion"] = json!(rv.to_string());
        }
        self.rv = rv;
        self.objects.insert(key, stored.clone());
        let kind = if old.is_some() { ChangeType::Modified } else { ChangeType::Added };
        self.record(Change { rv: self.rv, rid, namespace, name, kind, old, object: stored.clone() });
        stored
    }

    /// Deletes `(rid, namespace, name)` and tells watches; returns the final object.
    fn remove(&mut self, rid: Rid, namespace: String, name: &str) -> Option<Value> {
        let mut obj = self.objects.remove(&(rid, namespace.clone(), name.to_string()))?;
        self.rv += 1;
        obj["metadata"]["resourceVersion"] = json!(self.rv.to_string());
        let change = Change {
            rv: self.rv,
            rid,
            namespace,
            name: name.to_string(),
            kind: ChangeType::Deleted,
            old: None,
            object: obj.clone(),
        };
        self.record(change);
        Some(obj)
    }

    fn record(&mut self, change: Change) {
        self.watches.retain(|w| {
            let in_scope =
                w.rid == change.rid && w.namespace.as_ref().is_none_or(|ns| *ns == change.namespace);
            match change.event_for(&w.selector).filter(|_| in_scope) {
                Some(kind) => w.tx.send(event_line(kind, &change.object)).is_ok(),
                None => !w.tx.is_closed(),
            }
        });
        self.history.push(change);
    }
}

fn parse_continue(token: &str) -> Result<(u64, (String, String)), Failure> {
    let invalid = || Failure::bad_request(format!("continue key is not valid: {token:?}"));
    let mut parts = token.splitn(3, '/');
    let (Some(rv), Some(ns), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(invalid());
    };
    let rv = rv.parse().map_err(|_| invalid())?;
    Ok((rv, (ns.to_string(), name.to_string())))
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else { unreachable!() };
    for (k, v) in patch {
        if v.is_null() {
            target.remove(k);
        } else {
            merge_patch(target.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

fn method_not_allowed() -> Failure {
    Failure::new(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
}

fn version() -> Value {
    json!({
        "major": "1",
        "minor": "34",
        "emulationMajor": "1",
        "emulationMinor": "34",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "33",
        "gitVersion": "v1.34.0-fakekube",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-08-27T00:00:00Z",
        "goVersion": "go1.24.6",
        "compiler": "gc",
        "platform": "linux/amd64"
    })
}
