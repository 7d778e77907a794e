//! What minimization keeps of the lists and free strings an object may grow without end,
//! bounded so that no object the API server admits becomes an observation near the
//! producer's limit (docs/security.md, "Bounds"). A Job or Pod as Kubernetes writes it
//! stays as it is; only a pathological or crafted one is cut, and what is cut is counted
//! ([`Cuts`]).

use super::super::model::{ContainerObservation, Job, JobCondition, Pod};

/// The most condition types a Job keeps, one condition each (Kubernetes sets about six:
/// `Complete`, `Failed`, `SuccessCriteriaMet`, `FailureTarget`, `Suspended`; the set is open).
pub const MAX_CONDITION_TYPES: usize = 16;
/// The longest reason kept (a condition's, a container termination's), bytes; Kubernetes
/// reasons are short CamelCase words.
pub const MAX_REASON_BYTES: usize = 256;
/// The most containers kept of a Pod's `containers`, and again of its `initContainers`.
/// The API sets no count, only the object's size (about 1.5 MB), which admits thousands of
/// minimal containers; 256 each keeps a worst-case Pod (every reason and container id at
/// its longest, 256 KiB of allowlisted annotations) under the producer's 1 MB.
pub const MAX_CONTAINERS: usize = 256;

/// What bounding cut, per kind of cut: conditions (repeats of a type, types past the
/// 16th), containers (past the 256th of a list) and reasons (shortened).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Cuts {
    /// Job conditions dropped.
    pub conditions: u64,
    /// Pod containers (and init containers) dropped.
    pub containers: u64,
    /// Reasons shortened to [`MAX_REASON_BYTES`].
    pub reasons: u64,
}

impl Cuts {
    /// The sum of both.
    pub fn plus(self, other: Cuts) -> Cuts {
        Cuts {
            conditions: self.conditions + other.conditions,
            containers: self.containers + other.containers,
            reasons: self.reasons + other.reasons,
        }
    }

    /// What was cut since `earlier` (a total taken before).
    pub fn since(self, earlier: Cuts) -> Cuts {
        Cuts {
            conditions: self.conditions - earlier.conditions,
            containers: self.containers - earlier.containers,
            reasons: self.reasons - earlier.reasons,
        }
    }

    /// Whether anything was cut.
    pub fn any(&self) -> bool {
        *self != Cuts::default()
    }
}

/// Keeps one condition per type — the latest by `lastTransitionTime`, else the last listed,
/// in the order the types first appear — at most [`MAX_CONDITION_TYPES`] types, reasons cut
/// to [`MAX_REASON_BYTES`].
pub fn conditions(conditions: &mut Vec<JobCondition>) -> Cuts {
    let mut cuts = Cuts::default();
    let short = |c: &JobCondition| c.reason.as_ref().is_none_or(|r| r.len() <= MAX_REASON_BYTES);
    // What the Job controller writes needs nothing: checked without allocating, as this
    // runs for every Job observed.
    let repeated = |i: usize| conditions[..i].iter().any(|c| c.type_ == conditions[i].type_);
    if conditions.len() <= MAX_CONDITION_TYPES
        && conditions.iter().all(short)
        && !(0..conditions.len()).any(repeated)
    {
        return cuts;
    }
    let before = conditions.len();
    let mut kept: Vec<JobCondition> = Vec::new();
    for c in conditions.drain(..) {
        match kept.iter().position(|k| k.type_ == c.type_) {
            Some(i) if c.last_transition_time >= kept[i].last_transition_time => kept[i] = c,
            Some(_) => {}
            None if kept.len() < MAX_CONDITION_TYPES => kept.push(c),
            None => {}
        }
    }
    cuts.conditions = (before - kept.len()) as u64;
    for reason in kept.iter_mut().filter_map(|c| c.reason.as_mut()) {
        cuts.reasons += u64::from(shorten(reason));
    }
    *conditions = kept;
    cuts
}

/// [`conditions`] of a Job.
pub fn job(job: &mut Job) -> Cuts {
    conditions(&mut job.status.conditions)
}

/// Keeps the first [`MAX_CONTAINERS`] of each container list, termination reasons cut to
/// [`MAX_REASON_BYTES`].
pub fn pod(pod: &mut Pod) -> Cuts {
    let mut cuts = Cuts::default();
    for list in [&mut pod.containers, &mut pod.init_containers] {
        cuts.containers += list.len().saturating_sub(MAX_CONTAINERS) as u64;
        list.truncate(MAX_CONTAINERS);
        for c in list.iter_mut() {
            cuts.reasons += container_reasons(c);
        }
    }
    cuts
}

fn container_reasons(c: &mut ContainerObservation) -> u64 {
    [&mut c.state, &mut c.last_state]
        .into_iter()
        .filter_map(|t| t.as_mut().and_then(|t| t.reason.as_mut()))
        .map(|r| u64::from(shorten(r)))
        .sum()
}

/// Cuts `s` to at most [`MAX_REASON_BYTES`] on a character boundary; whether it did.
fn shorten(s: &mut String) -> bool {
    if s.len() <= MAX_REASON_BYTES {
        return false;
    }
    let cut = (0..=MAX_REASON_BYTES).rev().find(|&i| s.is_char_boundary(i)).unwrap_or(0);
    s.truncate(cut);
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::model::{ConditionStatus, ContainerTermination, ObjectMeta, PodPhase};

    fn condition(type_: &str, at: i64, reason: &str) -> JobCondition {
        JobCondition {
            type_: type_.to_owned(),
            status: ConditionStatus::True,
            reason: Some(reason.to_owned()),
            last_transition_time: Some(at),
        }
    }

    #[test]
    fn one_condition_per_type_the_latest_at_most_sixteen_types_reasons_short() {
        let mut list: Vec<JobCondition> = (0..300_000).map(|i| condition("Complete", i, "Done")).collect();
        list.insert(10, condition("Failed", 5, &"é".repeat(400)));
        list.extend((0..40).map(|i| condition(&format!("T{i}"), 1, "x")));
        let cuts = conditions(&mut list);
        assert_eq!(list.len(), MAX_CONDITION_TYPES);
        assert_eq!((list[0].type_.as_str(), list[0].last_transition_time), ("Complete", Some(299_999)));
        assert_eq!(list[1].type_, "Failed");
        let reason = list[1].reason.as_deref().unwrap();
        assert!(reason.len() <= MAX_REASON_BYTES && reason.len() >= MAX_REASON_BYTES - 1, "{}", reason.len());
        assert_eq!(cuts, Cuts { conditions: 300_041 - 16, containers: 0, reasons: 1 });
    }

    #[test]
    fn what_kubernetes_writes_is_kept_as_it_is() {
        let mut list =
            vec![condition("SuccessCriteriaMet", 1, "CompletionsReached"), condition("Complete", 2, "x")];
        let before = list.clone();
        assert!(!conditions(&mut list).any());
        assert_eq!(list, before);
        let mut pod = pod_of(vec![container("a"); 3], Vec::new());
        let before = pod.clone();
        assert!(!super::pod(&mut pod).any());
        assert_eq!(pod, before);
    }

    fn container(name: &str) -> ContainerObservation {
        ContainerObservation {
            name: name.to_owned(),
            requests_cpu: None,
            requests_memory: None,
            restart_count: 0,
            state: None,
            last_state: None,
        }
    }

    fn pod_of(containers: Vec<ContainerObservation>, init_containers: Vec<ContainerObservation>) -> Pod {
        let meta = ObjectMeta {
            uid: "00000000-0000-0000-0000-000000000001".to_owned(),
            namespace: "ns".to_owned(),
            name: "p".to_owned(),
            resource_version: None,
            creation_timestamp: None,
            deletion_timestamp: None,
            labels: Default::default(),
            annotations: Default::default(),
        };
        Pod { meta, controller: None, phase: PodPhase::Running, containers, init_containers }
    }

    #[test]
    fn containers_past_the_cap_are_cut_and_counted() {
        let mut pod = pod_of(
            (0..1000).map(|i| container(&format!("c{i}"))).collect(),
            vec![container("init"); MAX_CONTAINERS + 1],
        );
        pod.containers[0].last_state = Some(ContainerTermination {
            exit_code: 1,
            reason: Some("r".repeat(10_000)),
            exit_signal: None,
            started_at: None,
            finished_at: None,
            container_id: None,
        });
        let cuts = super::pod(&mut pod);
        assert_eq!((pod.containers.len(), pod.init_containers.len()), (MAX_CONTAINERS, MAX_CONTAINERS));
        assert_eq!(pod.containers[0].name, "c0", "the first are kept");
        assert_eq!(
            pod.containers[0].last_state.as_ref().unwrap().reason.as_ref().unwrap().len(),
            MAX_REASON_BYTES
        );
        assert_eq!(cuts, Cuts { conditions: 0, containers: 1000 - 256 + 1, reasons: 1 });
    }
}
