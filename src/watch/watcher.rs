//! The live watcher: kube-rs watches → trace entries → admission and minimization (the
//! same [`Observer`] as `replay`) → the input topics, while this process leads.
//!
//! Each kind is a **group** of kube-rs watch streams (one cluster-wide, or one per
//! configured namespace; one per configured Lease) that relist together: the group writes
//! SNAPSHOT_BEGIN for its kind with a new epoch, the objects listed, then SNAPSHOT_END once
//! every stream of the group has listed. When any stream of a group must relist (kube-rs
//! does after a 410 Gone), the whole group restarts with a new epoch, so "not re-listed
//! since the begin marker" stays true for every object of the kind.
//!
//! Watches decode straight into the allowlisted types of [`crate::trace::minimal`] (kube-rs
//! lists and watches any `Resource + DeserializeOwned`), with the label and annotation keys
//! the observer needs in scope while each stream is polled, which is where kube-rs parses:
//! nothing outside the allowlist becomes a value in memory, not even for a moment.
//!
//! A term starts the groups in dependency order — Namespaces, CronJobs, Jobs, then Pods and
//! Leases, each once the previous has listed — so admission rarely has to hold anything
//! back at start-up.

use std::{
    collections::BTreeSet,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use futures::{Stream, StreamExt, stream::BoxStream};
use kube::{
    Api, Client,
    runtime::{WatchStreamExt, watcher},
};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::{
    sync::{mpsc, watch},
    task::JoinSet,
};

use super::{
    PublishError, Publisher, WatchStats,
    leader::{self, LeaderConfig, Leadership},
};
use crate::{
    observe::{AdmissionCounts, Kind, Observer},
    trace::{
        KeptKeys, MinimalEntry, MinimalObject, TraceEvent,
        minimal::{self, CronJob, Job, Lease, Namespace, Pod},
    },
};

/// What the watcher watches, and how often it writes heartbeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WatchConfig {
    /// Namespaces whose Pods, Jobs and CronJobs are watched (empty: the whole cluster).
    /// Namespaces themselves are always watched cluster-wide: admission needs their
    /// annotations.
    pub namespaces: Vec<String>,
    /// Leases watched, as `namespace/name` (node Leases would dwarf everything else); the
    /// watcher's own leader Lease is always watched too.
    pub leases: Vec<String>,
    /// Interval between heartbeats on every partition of every input topic, in
    /// milliseconds.
    pub heartbeat_interval_ms: u64,
    /// Leader election.
    pub leader: LeaderConfig,
}

impl Default for WatchConfig {
    fn default() -> Self {
        Self {
            namespaces: Vec::new(),
            leases: vec!["kube-system/kube-controller-manager".into(), "kube-system/kube-scheduler".into()],
            heartbeat_interval_ms: 10_000,
            leader: LeaderConfig::default(),
        }
    }
}

impl WatchConfig {
    /// The Leases watched: the configured ones and the watcher's own leader Lease.
    pub fn watched_leases(&self) -> Vec<String> {
        let own = format!("{}/{}", self.leader.namespace(), self.leader.lease_name);
        let mut all = self.leases.clone();
        if !all.contains(&own) {
            all.push(own);
        }
        all
    }
}

/// Why the watcher stopped.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum WatchError {
    /// Publishing failed for good (the process exits and is restarted; the new term
    /// relists, so nothing is lost).
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// A configured Lease is not `namespace/name`.
    #[error("watch.leases: {0:?} is not namespace/name")]
    LeaseName(String),
}

/// Next epoch: above every epoch used before (by this process or, through the Lease, by
/// earlier leaders) and at least the wall clock in milliseconds.
#[derive(Debug, Clone)]
struct Epochs {
    last: Arc<Mutex<i64>>,
    tx: watch::Sender<i64>,
}

impl Epochs {
    fn next(&self) -> i64 {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        *last = (*last + 1).max(now_ms());
        self.tx.send_replace(*last);
        *last
    }
}

fn now_ms() -> i64 {
    jiff::Timestamp::now().as_millisecond()
}

/// What a group sends the publishing loop; each with its observation time.
#[derive(Debug)]
enum Msg {
    Begin { kind: Kind, epoch: i64 },
    End { kind: Kind, epoch: i64 },
    Applied(MinimalObject),
    Deleted(MinimalObject),
}

/// One watch event of any kind, as kube-rs yields it.
type KindEvent = Result<watcher::Event<MinimalObject>, watcher::Error>;
type Tagged = (usize, KindEvent);
type KindStream = BoxStream<'static, KindEvent>;

/// How often delivery reports are collected while the watch is quiet, in milliseconds.
const REAP_INTERVAL_MS: u64 = 20;

/// The kinds in start order; each starts once the one before has listed.
const ORDER: [Kind; 5] = [Kind::Namespace, Kind::CronJob, Kind::Job, Kind::Pod, Kind::Lease];

/// Runs until `stop`: elects, and while leading, watches and publishes what `observer`
/// makes of it (each term starts from a copy of `observer` as given: epoch 0, no heartbeat
/// seen, admission counted from zero).
pub async fn run(
    client: Client,
    observer: &Observer,
    cfg: &WatchConfig,
    identity: &str,
    publisher: &mut Publisher,
    stats: Arc<WatchStats>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), WatchError> {
    for l in &cfg.leases {
        if l.split_once('/').is_none_or(|(ns, n)| ns.is_empty() || n.is_empty()) {
            return Err(WatchError::LeaseName(l.clone()));
        }
    }
    let (leader_tx, mut leadership) = watch::channel(Leadership::Follower);
    let (epoch_tx, epoch_rx) = watch::channel(0i64);
    let lease_api: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), &cfg.leader.namespace());
    let elector = tokio::spawn(leader::run(
        lease_api,
        cfg.leader.clone(),
        identity.to_owned(),
        leader_tx,
        epoch_rx,
        stop.clone(),
        stats.health.clone(),
    ));
    // Admission counts of earlier terms: the exported counters only ever grow.
    let mut counted = AdmissionCounts::default();
    let result = loop {
        // Follow until leading (or stopped).
        tokio::select! {
            r = leadership.wait_for(Leadership::is_valid) => if r.is_err() { break Ok(()) },
            _ = stop.wait_for(|s| *s) => break Ok(()),
        }
        let floor = match &*leadership.borrow() {
            Leadership::Leader { epoch_floor, .. } => *epoch_floor,
            Leadership::Follower => continue,
        };
        stats.leader.store(true, Ordering::Relaxed);
        stats.terms.inc();
        let epochs = Epochs { last: Arc::new(Mutex::new(floor)), tx: epoch_tx.clone() };
        tracing::info!(%identity, epoch_floor = floor, "leading: relisting and publishing");
        let term = lead(
            &client,
            observer,
            cfg,
            publisher,
            &stats,
            &epochs,
            &mut leadership,
            &mut stop,
            &mut counted,
        )
        .await;
        stats.leader.store(false, Ordering::Relaxed);
        publisher.flush().await?;
        match term {
            Ok(true) => break Ok(()),
            Ok(false) => tracing::warn!(%identity, "leadership lost: stopped publishing"),
            Err(e) => break Err(e),
        }
    };
    // The elector sees `stop` too and releases the Lease if it holds it.
    let _ = elector.await;
    result
}

/// One term. `Ok(true)`: stopped; `Ok(false)`: leadership lost.
#[allow(clippy::too_many_arguments)]
async fn lead(
    client: &Client,
    observer: &Observer,
    cfg: &WatchConfig,
    publisher: &mut Publisher,
    stats: &Arc<WatchStats>,
    epochs: &Epochs,
    leadership: &mut watch::Receiver<Leadership>,
    stop: &mut watch::Receiver<bool>,
    counted: &mut AdmissionCounts,
) -> Result<bool, WatchError> {
    let mut observer = observer.clone();
    let keys = observer.kept_keys();
    let (tx, mut rx) = mpsc::channel::<(i64, Msg)>(1_024);
    let mut groups = JoinSet::new();
    let mut started = 0;
    let mut listed: BTreeSet<Kind> = BTreeSet::new();
    // Until the first SNAPSHOT_BEGIN the observer's epoch is 0: a heartbeat then would carry
    // an epoch below the previous leader's (epochs never decrease), so none is sent.
    let mut begun = false;
    let spawn_next = |groups: &mut JoinSet<()>, started: &mut usize| {
        // Pods and Leases have no dependants: start both together.
        while *started < ORDER.len() {
            let kind = ORDER[*started];
            groups.spawn(group(
                client.clone(),
                kind,
                cfg.clone(),
                epochs.clone(),
                tx.clone(),
                Arc::clone(stats),
                Arc::clone(&keys),
            ));
            *started += 1;
            if kind != Kind::Pod {
                break;
            }
        }
    };
    spawn_next(&mut groups, &mut started);
    let mut heartbeat = tokio::time::interval(Duration::from_millis(cfg.heartbeat_interval_ms.max(1)));
    heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Delivery reports are collected at least this often, so the acknowledgement latency
    // exported is exact to within this resolution.
    let mut reap = tokio::time::interval(Duration::from_millis(REAP_INTERVAL_MS));
    reap.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome = loop {
        stats.health.publishing.beat();
        let entry = tokio::select! {
            _ = reap.tick() => {
                publisher.reap()?;
                continue;
            }
            msg = rx.recv() => match msg {
                Some((at, msg)) => {
                    begun |= matches!(msg, Msg::Begin { .. });
                    if let Msg::End { kind, .. } = &msg
                        && listed.insert(*kind)
                    {
                        spawn_next(&mut groups, &mut started);
                    }
                    to_entry(at, msg)
                }
                None => break Ok(false),
            },
            _ = heartbeat.tick() => {
                if !begun {
                    continue;
                }
                stats.heartbeats.inc();
                MinimalEntry { observed_at_ms: now_ms(), event: TraceEvent::Heartbeat }
            }
            r = leadership.changed() => {
                if r.is_err() || !leadership.borrow().is_valid() { break Ok(false) }
                continue;
            }
            _ = stop.wait_for(|s| *s) => break Ok(true),
        };
        // A leader whose term ran out publishes nothing more (another may take over).
        if !leadership.borrow().is_valid() {
            break Ok(false);
        }
        let cut_before = observer.cuts();
        for released in observer.admit(entry) {
            match released {
                Ok(observations) => {
                    for obs in &observations {
                        publisher.publish(obs).await?;
                    }
                }
                Err(e) => tracing::warn!(error = %e, reason = e.reason(), "object not observable; skipped"),
            }
        }
        stats.set_admission(&counted.plus(observer.admission()));
        stats.count_cuts(observer.cuts().since(cut_before));
        publisher.reap()?;
        stats.set_publisher_totals(publisher.counts());
    };
    // Between terms nothing publishes: a standby is not stalled.
    stats.health.publishing.retire();
    groups.shutdown().await;
    *counted = counted.plus(observer.admission());
    outcome
}

fn to_entry(at: i64, msg: Msg) -> MinimalEntry {
    let event = match msg {
        Msg::Begin { kind, epoch } => {
            TraceEvent::SnapshotBegin { epoch, kinds: Some(vec![kind.as_str().to_owned()]) }
        }
        Msg::End { kind, epoch } => {
            TraceEvent::SnapshotEnd { epoch, kinds: Some(vec![kind.as_str().to_owned()]) }
        }
        Msg::Applied(o) => TraceEvent::Applied(o),
        Msg::Deleted(o) => TraceEvent::Deleted(o),
    };
    MinimalEntry { observed_at_ms: at, event }
}

/// A stream polled with `keys` as the label and annotation keys decoding keeps: kube-rs
/// parses what it lists and watches inside `poll_next`.
struct Keeping<S> {
    inner: S,
    keys: Arc<KeptKeys>,
}

impl<S: Stream + Unpin> Stream for Keeping<S> {
    type Item = S::Item;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<S::Item>> {
        let this = &mut *self;
        minimal::keeping(&this.keys, || this.inner.poll_next_unpin(cx))
    }
}

/// The watch streams of one kind, each event decoded into [`MinimalObject`] (keeping
/// `keys`) and tagged with its stream's index.
fn streams(
    client: &Client,
    kind: Kind,
    cfg: &WatchConfig,
    keys: &Arc<KeptKeys>,
) -> Vec<BoxStream<'static, Tagged>> {
    fn typed<K>(
        api: Api<K>,
        config: watcher::Config,
        wrap: fn(K) -> MinimalObject,
        keys: &Arc<KeptKeys>,
    ) -> KindStream
    where
        K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
        K::DynamicType: Default,
    {
        Keeping { inner: watcher(api, config).boxed(), keys: Arc::clone(keys) }
            .default_backoff()
            .map(move |ev| {
                ev.map(|e| match e {
                    watcher::Event::Apply(k) => watcher::Event::Apply(wrap(k)),
                    watcher::Event::Delete(k) => watcher::Event::Delete(wrap(k)),
                    watcher::Event::Init => watcher::Event::Init,
                    watcher::Event::InitApply(k) => watcher::Event::InitApply(wrap(k)),
                    watcher::Event::InitDone => watcher::Event::InitDone,
                })
            })
            .boxed()
    }
    let wc = watcher::Config::default;
    let scoped = |f: &dyn Fn(Option<&str>) -> KindStream| {
        if cfg.namespaces.is_empty() {
            vec![f(None)]
        } else {
            cfg.namespaces.iter().map(|n| f(Some(n))).collect()
        }
    };
    let list = match kind {
        Kind::Namespace => {
            vec![typed(
                Api::<Namespace>::all(client.clone()),
                wc(),
                |o| MinimalObject::Namespace(Box::new(o)),
                keys,
            )]
        }
        Kind::CronJob => scoped(&|ns| {
            let api = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
            typed::<CronJob>(api, wc(), |o| MinimalObject::CronJob(Box::new(o)), keys)
        }),
        Kind::Job => scoped(&|ns| {
            let api = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
            typed::<Job>(api, wc(), |o| MinimalObject::Job(Box::new(o)), keys)
        }),
        Kind::Pod => scoped(&|ns| {
            let api = ns.map_or_else(|| Api::all(client.clone()), |n| Api::namespaced(client.clone(), n));
            typed::<Pod>(api, wc(), |o| MinimalObject::Pod(Box::new(o)), keys)
        }),
        // The configured Leases and the watcher's own (DESIGN §3).
        Kind::Lease => cfg
            .watched_leases()
            .iter()
            .filter_map(|l| l.split_once('/'))
            .map(|(ns, name)| {
                let api = Api::<Lease>::namespaced(client.clone(), ns);
                let fields = wc().fields(&format!("metadata.name={name}"));
                typed(api, fields, |o| MinimalObject::Lease(Box::new(o)), keys)
            })
            .collect(),
    };
    list.into_iter().enumerate().map(|(i, s)| s.map(move |e| (i, e)).boxed()).collect()
}

/// Runs one kind's group: relists it as a unit, forever (until aborted).
async fn group(
    client: Client,
    kind: Kind,
    cfg: WatchConfig,
    epochs: Epochs,
    tx: mpsc::Sender<(i64, Msg)>,
    stats: Arc<WatchStats>,
    keys: Arc<KeptKeys>,
) {
    let closed = Arc::new(AtomicBool::new(false));
    let send = |msg: Msg| {
        let (tx, closed) = (tx.clone(), Arc::clone(&closed));
        async move {
            if tx.send((now_ms(), msg)).await.is_err() {
                closed.store(true, Ordering::Relaxed);
            }
        }
    };
    loop {
        let all = streams(&client, kind, &cfg, &keys);
        if all.is_empty() {
            // Nothing configured for this kind: it has listed, trivially.
            let epoch = epochs.next();
            send(Msg::Begin { kind, epoch }).await;
            send(Msg::End { kind, epoch }).await;
            std::future::pending::<()>().await;
        }
        let n = all.len();
        let mut merged = futures::stream::select_all(all);
        let epoch = epochs.next();
        stats.relist(kind.as_str());
        send(Msg::Begin { kind, epoch }).await;
        let mut listing: BTreeSet<usize> = (0..n).collect();
        let mut began: BTreeSet<usize> = BTreeSet::new();
        let restart = loop {
            let Some((i, event)) = merged.next().await else { break false };
            match event {
                Ok(watcher::Event::Init) => {
                    // A stream that has listed lists again (a 410): the group relists whole.
                    if !began.insert(i) {
                        break true;
                    }
                }
                Ok(watcher::Event::InitApply(o) | watcher::Event::Apply(o)) => {
                    stats.event(kind.as_str());
                    send(Msg::Applied(o)).await;
                }
                Ok(watcher::Event::Delete(o)) => {
                    stats.event(kind.as_str());
                    send(Msg::Deleted(o)).await;
                }
                Ok(watcher::Event::InitDone) => {
                    if listing.remove(&i) && listing.is_empty() {
                        send(Msg::End { kind, epoch }).await;
                    }
                }
                // The stream backs off and retries by itself.
                Err(e) => {
                    tracing::warn!(kind = kind.as_str(), error = %e, "watch error; retrying with backoff")
                }
            }
            if closed.load(Ordering::Relaxed) {
                return;
            }
        };
        if !restart {
            return;
        }
        tracing::info!(kind = kind.as_str(), "relisting (the API server expired a watch)");
    }
}
