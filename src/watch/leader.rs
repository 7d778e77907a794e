//! Leader election on a `coordination.k8s.io/v1` Lease, compatible with client-go's
//! `leaderelection` (the same fields, the same release), so `kubectl get lease` reads it
//! the usual way. Only the leader publishes (DESIGN §3, "one publisher").
//!
//! * A candidate acquires the Lease when it does not exist, has no holder, or has not
//!   changed for `lease_duration_secs` **as measured on the candidate's own clock** since
//!   it first saw that version (client-go's rule: no trust in other nodes' clocks).
//! * The leader renews every `retry_period_secs`. Its term is valid for
//!   `renew_deadline_secs` after the last successful renewal, measured locally; a
//!   deadline shorter than the lease duration means a leader that cannot renew stops
//!   publishing before any other candidate may take over.
//! * Writes use the Lease's `resourceVersion` (optimistic concurrency): of two candidates,
//!   one wins, the other gets 409 and stays a follower.
//! * The Lease also carries the last snapshot epoch (`kubefacts.io/epoch`), so a new
//!   leader starts with a higher epoch than any before it, whatever its clock says.

use std::time::{Duration, Instant};

use jiff::Timestamp;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
};
use kube::{
    Api,
    api::{PostParams, ResourceExt},
};
use serde::{Deserialize, Serialize};
use thiserror::Error;
use tokio::sync::watch;

use super::stats::WatcherHealth;

/// Annotation on the Lease holding the last snapshot epoch published.
pub const EPOCH_ANNOTATION: &str = "kubefacts.io/epoch";

/// Leader election settings (client-go's defaults).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LeaderConfig {
    /// Name of the Lease.
    pub lease_name: String,
    /// Namespace of the Lease (default: `$POD_NAMESPACE`, else `default`).
    pub lease_namespace: Option<String>,
    /// How long a Lease not renewed stays held, in seconds.
    pub lease_duration_secs: u64,
    /// How long a leader keeps publishing without a successful renewal, in seconds
    /// (must be shorter than the lease duration).
    pub renew_deadline_secs: u64,
    /// How often the leader renews and candidates retry, in seconds.
    pub retry_period_secs: u64,
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self {
            lease_name: "kubefacts-watcher".into(),
            lease_namespace: None,
            lease_duration_secs: 15,
            renew_deadline_secs: 10,
            retry_period_secs: 2,
        }
    }
}

impl LeaderConfig {
    /// The Lease's namespace.
    pub fn namespace(&self) -> String {
        self.lease_namespace
            .clone()
            .or_else(|| std::env::var("POD_NAMESPACE").ok())
            .unwrap_or_else(|| "default".into())
    }
}

/// Why an election round failed (the elector retries; these are logged).
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LeaderError {
    /// The API refused or failed a call.
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// The client error.
        #[source]
        source: Box<kube::Error>,
    },
}

/// The current term, as the elector publishes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Leadership {
    /// Another candidate holds the Lease (or none could be reached).
    Follower,
    /// This candidate holds the Lease.
    Leader {
        /// Publishing is allowed until this instant unless renewed.
        valid_until: Instant,
        /// The highest epoch recorded on the Lease when the term began.
        epoch_floor: i64,
    },
}

impl Leadership {
    /// Whether publishing is allowed now.
    pub fn is_valid(&self) -> bool {
        matches!(self, Self::Leader { valid_until, .. } if Instant::now() < *valid_until)
    }
}

/// Runs elections for `identity` until `stop` fires, publishing every change of term on
/// `tx`; on stop, a leader releases the Lease (empty holder) so a successor need not wait.
/// `epoch` reports the latest epoch used, written onto the Lease at each renewal.
pub async fn run(
    api: Api<Lease>,
    cfg: LeaderConfig,
    identity: String,
    tx: watch::Sender<Leadership>,
    epoch: watch::Receiver<i64>,
    mut stop: watch::Receiver<bool>,
    health: WatcherHealth,
) {
    let mut seen: Option<(String, Instant)> = None; // (resourceVersion, first seen locally)
    let period = Duration::from_secs(cfg.retry_period_secs.max(1));
    loop {
        health.election.beat();
        let latest = *epoch.borrow();
        let round = elect(&api, &cfg, &identity, &mut seen, latest).await;
        match &round {
            Ok(_) => health.ready.met(),
            Err(e) if !matches!(&*tx.borrow(), Leadership::Leader { .. }) => {
                health.ready.waiting(format!("leader election failing: {e}"));
            }
            Err(_) => {}
        }
        let now = Instant::now();
        let next = match round {
            Ok(Some(floor)) => {
                let epoch_floor = match &*tx.borrow() {
                    Leadership::Leader { epoch_floor, .. } => *epoch_floor,
                    Leadership::Follower => floor,
                };
                let valid_until = now + Duration::from_secs(cfg.renew_deadline_secs);
                Leadership::Leader { valid_until, epoch_floor }
            }
            Ok(None) => Leadership::Follower,
            Err(e) => {
                tracing::warn!(error = %e, "leader election round failed");
                // A leader keeps its term until the deadline; a failed renewal is not a loss yet.
                match &*tx.borrow() {
                    l @ Leadership::Leader { .. } if l.is_valid() => l.clone(),
                    _ => Leadership::Follower,
                }
            }
        };
        let changed = std::mem::discriminant(&next) != std::mem::discriminant(&*tx.borrow());
        if changed {
            tracing::info!(leader = matches!(next, Leadership::Leader { .. }), %identity, "leadership changed");
        }
        tx.send_replace(next);
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    let leading = matches!(&*tx.borrow(), Leadership::Leader { .. });
    if leading {
        tx.send_replace(Leadership::Follower);
        let latest = *epoch.borrow();
        if let Err(e) = release(&api, &cfg, &identity, latest).await {
            tracing::warn!(error = %e, "releasing the lease");
        }
    }
}

fn api_error(cfg: &LeaderConfig) -> impl FnOnce(kube::Error) -> LeaderError + '_ {
    move |e| LeaderError::Api {
        namespace: cfg.namespace(),
        name: cfg.lease_name.clone(),
        source: Box::new(e),
    }
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

/// One round: `Some(epoch floor)` if this candidate holds the Lease afterwards.
async fn elect(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    identity: &str,
    seen: &mut Option<(String, Instant)>,
    epoch: i64,
) -> Result<Option<i64>, LeaderError> {
    let Some(current) = api.get_opt(&cfg.lease_name).await.map_err(api_error(cfg))? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(cfg.lease_name.clone()),
                namespace: Some(cfg.namespace()),
                annotations: Some([(EPOCH_ANNOTATION.to_owned(), epoch.to_string())].into()),
                ..Default::default()
            },
            spec: Some(held_by(cfg, identity, 0, true)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Some(epoch)),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
            Err(e) => Err(api_error(cfg)(e)),
        };
    };
    let spec = current.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let floor = current.annotations().get(EPOCH_ANNOTATION).and_then(|e| e.parse::<i64>().ok()).unwrap_or(0);
    let version = current.resource_version().unwrap_or_default();
    let ours = holder == identity;
    if !ours && !holder.is_empty() {
        // Held by another: expired only when unchanged for a lease duration on our clock.
        let first_seen = match seen {
            Some((v, at)) if *v == version => *at,
            _ => {
                *seen = Some((version.clone(), Instant::now()));
                Instant::now()
            }
        };
        let duration = spec.lease_duration_seconds.map_or(cfg.lease_duration_secs, |d| d.max(1) as u64);
        if first_seen.elapsed() < Duration::from_secs(duration) {
            return Ok(None);
        }
    }
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
    let mut next = current.clone();
    next.spec = Some(LeaseSpec {
        acquire_time: if ours { spec.acquire_time.clone() } else { Some(now_micro()) },
        ..held_by(cfg, identity, transitions, false)
    });
    next.annotations_mut().insert(EPOCH_ANNOTATION.to_owned(), epoch.max(floor).to_string());
    match api.replace(&cfg.lease_name, &PostParams::default(), &next).await {
        Ok(_) => Ok(Some(floor)),
        // Someone else wrote first (optimistic concurrency): not ours this round.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(None),
        Err(e) => Err(api_error(cfg)(e)),
    }
}

fn held_by(cfg: &LeaderConfig, identity: &str, transitions: i32, acquiring: bool) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(cfg.lease_duration_secs as i32),
        acquire_time: acquiring.then(now_micro),
        renew_time: Some(now_micro()),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Gives the Lease up as client-go does: empty holder, one-second duration, times now.
async fn release(
    api: &Api<Lease>,
    cfg: &LeaderConfig,
    identity: &str,
    epoch: i64,
) -> Result<(), LeaderError> {
    let Some(mut lease) = api.get_opt(&cfg.lease_name).await.map_err(api_error(cfg))? else { return Ok(()) };
    let spec = lease.spec.clone().unwrap_or_default();
    if spec.holder_identity.as_deref() != Some(identity) {
        return Ok(());
    }
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(String::new()),
        lease_duration_seconds: Some(1),
        acquire_time: Some(now_micro()),
        renew_time: Some(now_micro()),
        lease_transitions: spec.lease_transitions,
        ..Default::default()
    });
    let floor = lease.annotations().get(EPOCH_ANNOTATION).and_then(|e| e.parse::<i64>().ok()).unwrap_or(0);
    lease.annotations_mut().insert(EPOCH_ANNOTATION.to_owned(), epoch.max(floor).to_string());
    api.replace(&cfg.lease_name, &PostParams::default(), &lease).await.map_err(api_error(cfg))?;
    Ok(())
}
