//! What the runtime checks of every input record before it enters a task's merge: the
//! envelope (timestamp, heartbeat header, key, value), the bytes (decoded once, here) and
//! the topic's contract (an event that makes sense for the topic, its object, its key).
//! Both drivers admit the same way, so a record is refused for the same reason on Kafka
//! and in memory, and a refused record enters the merge carrying no time
//! ([`super::Mark::Void`]): it cannot hold its lane back or move stream time.

use super::{
    HEARTBEAT_KEY,
    clock::{Gate, Writer},
    deadletter::Reason,
    processor::{DecodeInput, ProcessError, Stamp},
};

use crate::codec::{Codec, CodecError};

/// How a stage admits its inputs, by input index (co-partitioned inputs, then globals).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputRules {
    /// Inputs whose records are judged by the heartbeats that follow them (source topics
    /// the watcher heartbeats; [`super::Gate::checking`]).
    pub checked: Vec<usize>,
    /// Inputs whose dead letters are written elsewhere: by an earlier stage reading the
    /// same topic, or by this stage's co-partitioned read of a topic it also reads whole.
    /// A record is dead-lettered once, by the stage that owns its input.
    pub dead_lettered_elsewhere: Vec<usize>,
    /// How far ahead of the heartbeat after it a record of a checked input may be, ms.
    pub max_ahead_ms: i64,
    /// How far behind the heartbeat before it a record of a checked input may be, ms.
    pub max_behind_ms: i64,
    /// How far a checked record's own observation time may be from its record timestamp,
    /// ms (the publisher stamps the record with it).
    pub max_stamp_skew_ms: i64,
    /// The cluster every heartbeat and snapshot marker of a checked input must name (the
    /// pipeline file's); `None`: any.
    pub cluster: Option<String>,
}

impl Default for InputRules {
    /// Nothing checked, every dead letter written here.
    fn default() -> Self {
        Self {
            checked: Vec::new(),
            dead_lettered_elsewhere: Vec::new(),
            max_ahead_ms: i64::MAX,
            max_behind_ms: i64::MAX,
            max_stamp_skew_ms: i64::MAX,
            cluster: None,
        }
    }
}

impl InputRules {
    /// Whether task `task` of `tasks` writes the dead letter of a record of `input`,
    /// partition `partition`: never for an input dead-lettered elsewhere; for a global
    /// input (`global`), which every task reads, only the task `partition % tasks`.
    pub fn writes_dead_letter(
        &self,
        input: usize,
        global: bool,
        partition: i32,
        task: i32,
        tasks: i32,
    ) -> bool {
        if self.dead_lettered_elsewhere.contains(&input) {
            return false;
        }
        !global || partition.rem_euclid(tasks.max(1)) == task
    }
}

/// A record as the runtime reads it, before decoding.
#[derive(Debug, Clone, Copy)]
pub struct Envelope<'a> {
    /// Input index (co-partitioned inputs, then globals).
    pub input: usize,
    /// Key bytes.
    pub key: Option<&'a [u8]>,
    /// Value bytes.
    pub value: Option<&'a [u8]>,
    /// Its timestamp, epoch ms; `None` when the record has none.
    pub timestamp_ms: Option<i64>,
    /// Whether it carries the heartbeat header.
    pub time_header: bool,
    /// Its writer header: absent (`Some(SOLE)` is assumed by the caller), valid, or present
    /// and not `<task>/<tasks>` (`None`).
    pub writer: Option<Writer>,
    /// The input's rules when it is checked ([`InputRules::checked`]): its observations'
    /// own times and publishers are checked too.
    pub checked: Option<&'a InputRules>,
}

/// What admission says of a record.
#[derive(Debug)]
pub enum Admitted<I> {
    /// A record its processor may use.
    Use(I),
    /// Forwarded stream time (the heartbeat header, the heartbeat key, no value).
    Time,
    /// A record nothing can use: dead-letter it with this reason.
    Reject {
        /// Bounded reason code.
        reason: &'static str,
        /// What was wrong, for people.
        detail: String,
    },
    /// It cannot be judged now (the schema registry is unreachable): admit it again later,
    /// and nothing after it on its lane before it.
    Retry(CodecError),
}

impl<I> Admitted<I> {
    fn reject(reason: Reason, detail: impl Into<String>) -> Self {
        Self::Reject { reason: reason.as_str(), detail: detail.into() }
    }
}

impl<I: Clone> Admitted<I> {
    /// The same verdict for another lane or task that reads the same bytes, without
    /// decoding them again. `None` for [`Admitted::Retry`]: that record is admitted again.
    pub fn again(&self) -> Option<Self> {
        Some(match self {
            Self::Use(i) => Self::Use(i.clone()),
            Self::Time => Self::Time,
            Self::Reject { reason, detail } => Self::Reject { reason, detail: detail.clone() },
            Self::Retry(_) => return None,
        })
    }
}

/// Admits one record of a stage whose inputs decode as `I`.
pub async fn admit<I: DecodeInput>(codec: &Codec, env: Envelope<'_>) -> Admitted<I> {
    match env.timestamp_ms {
        None => return Admitted::reject(Reason::TimestampOutOfRange, "the record has no timestamp"),
        Some(ts) if ts < 0 => {
            return Admitted::reject(
                Reason::TimestampOutOfRange,
                format!("timestamp {ts} ms is before the Unix epoch"),
            );
        }
        Some(_) => {}
    }
    let Some(_) = env.writer else {
        return Admitted::reject(
            Reason::BadWriterHeader,
            "a kubefacts-writer header that is not <task>/<tasks>",
        );
    };
    let Some(value) = env.value else {
        if !env.time_header {
            return Admitted::reject(Reason::NullValue, "a record with a null value and no heartbeat header");
        }
        if env.key != Some(HEARTBEAT_KEY) {
            return Admitted::reject(
                Reason::BadHeartbeat,
                format!("a forwarded heartbeat must be keyed {:?}", String::from_utf8_lossy(HEARTBEAT_KEY)),
            );
        }
        return Admitted::Time;
    };
    let decoded = match I::decode(env.input, codec, value).await {
        Ok(d) => d,
        Err(e) if e.is_retriable() => return Admitted::Retry(e),
        Err(e) => return Admitted::Reject { reason: e.reason(), detail: e.to_string() },
    };
    if let Err(ProcessError { reason, detail }) = decoded.check(env.key, env.time_header) {
        return Admitted::reject(reason, detail);
    }
    if let (Some(rules), Some(stamp), Some(ts)) = (env.checked, decoded.stamp(), env.timestamp_ms)
        && let Err(refused) = check_stamp(rules, &stamp, ts)
    {
        return refused;
    }
    Admitted::Use(decoded)
}

/// The checks of a checked input's observation that need nothing but the record: its own
/// observation time agrees with its record timestamp, and a heartbeat or marker names the
/// pipeline's cluster. (Which instance may publish is the lane's to judge: [`vet`].)
fn check_stamp<I>(rules: &InputRules, stamp: &Stamp<'_>, timestamp_ms: i64) -> Result<(), Admitted<I>> {
    if stamp.observed_at_ms < 0 {
        return Err(Admitted::reject(
            Reason::TimestampBehind,
            format!("observed_at {} ms is before the Unix epoch", stamp.observed_at_ms),
        ));
    }
    let skew = stamp.observed_at_ms.abs_diff(timestamp_ms);
    if skew > rules.max_stamp_skew_ms.unsigned_abs() {
        return Err(Admitted::reject(
            Reason::ObservedAtMismatch,
            format!(
                "observed_at {} ms is {skew} ms from the record timestamp {timestamp_ms} ms \
                 (more than [process].max_stamp_skew_ms): the publisher stamps a record with it",
                stamp.observed_at_ms
            ),
        ));
    }
    if let (Some(publisher), Some(cluster)) = (&stamp.publisher, &rules.cluster)
        && publisher.cluster != cluster
    {
        return Err(Admitted::reject(
            Reason::UnknownPublisher,
            format!(
                "a heartbeat or marker of cluster {:?}, but this pipeline observes {cluster:?}",
                bounded(publisher.cluster)
            ),
        ));
    }
    Ok(())
}

/// At most 128 characters of a publisher-given name, for a dead letter's detail.
fn bounded(s: &str) -> &str {
    s.char_indices().nth(128).map_or(s, |(i, _)| &s[..i])
}

/// Judges the publisher of a heartbeat or marker admitted on `lane` of `gate`
/// ([`Gate::vet`]), before it is pushed: one its lane does not know is refused
/// (`unknown_publisher`) and so carries no time. Other records pass unchanged.
pub fn vet<T, I: DecodeInput>(
    gate: &mut Gate<T>,
    lane: usize,
    (writer, offset): (Writer, i64),
    admitted: Admitted<I>,
) -> Admitted<I> {
    let Admitted::Use(decoded) = &admitted else { return admitted };
    if !gate.is_checked(lane) {
        return admitted;
    }
    let Some(Stamp { publisher: Some(p), .. }) = decoded.stamp() else { return admitted };
    let claim = p.claim();
    match gate.vet(lane, writer, offset, claim) {
        Ok(()) => admitted,
        Err(epoch) => Admitted::reject(
            Reason::UnknownPublisher,
            format!(
                "a heartbeat or marker of instance {:?} (epoch {}), but epoch {epoch} of this partition \
                 was begun by another instance: only a SNAPSHOT_BEGIN of a later epoch changes publisher",
                bounded(p.instance),
                p.epoch
            ),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::processor::Publisher;

    /// An observation as text: `observed_at[,cluster,instance,epoch,begins]`.
    #[derive(Debug, Clone)]
    struct Obs(String);

    impl DecodeInput for Obs {
        async fn decode(_: usize, _: &Codec, bytes: &[u8]) -> Result<Self, CodecError> {
            Ok(Obs(String::from_utf8(bytes.to_vec()).unwrap()))
        }

        fn stamp(&self) -> Option<Stamp<'_>> {
            let f: Vec<&str> = self.0.split(',').collect();
            let publisher = (f.len() == 5).then(|| Publisher {
                cluster: f[1],
                instance: f[2],
                epoch: f[3].parse().unwrap(),
                begins: f[4] == "begin",
            });
            Some(Stamp { observed_at_ms: f[0].parse().unwrap(), publisher })
        }
    }

    fn rules() -> InputRules {
        InputRules {
            checked: vec![0],
            max_stamp_skew_ms: 100,
            cluster: Some("prod".into()),
            ..InputRules::default()
        }
    }

    async fn admitted(value: &str, timestamp_ms: i64, rules: Option<&InputRules>) -> Admitted<Obs> {
        let env = Envelope {
            input: 0,
            key: Some(b"k"),
            value: Some(value.as_bytes()),
            timestamp_ms: Some(timestamp_ms),
            time_header: false,
            writer: Some(Writer::SOLE),
            checked: rules,
        };
        admit(&Codec::new(None).unwrap(), env).await
    }

    fn reason<I>(a: &Admitted<I>) -> Option<&'static str> {
        match a {
            Admitted::Reject { reason, .. } => Some(reason),
            _ => None,
        }
    }

    #[tokio::test]
    async fn an_observed_at_far_from_the_record_timestamp_is_refused_on_a_checked_input() {
        let r = rules();
        assert_eq!(reason(&admitted("1000", 1_100, Some(&r)).await), None, "within the skew");
        assert_eq!(reason(&admitted("1000", 900, Some(&r)).await), None, "within the skew, before");
        assert_eq!(reason(&admitted("1000", 1_101, Some(&r)).await), Some("observed_at_mismatch"));
        assert_eq!(
            reason(&admitted("631152000000", 1_700_000_000_000, Some(&r)).await),
            Some("observed_at_mismatch")
        );
        assert_eq!(
            reason(&admitted("1000", 1_101, None).await),
            None,
            "an unchecked input is not held to it"
        );
    }

    #[tokio::test]
    async fn an_observation_before_the_unix_epoch_is_refused() {
        let r = InputRules { max_stamp_skew_ms: i64::MAX, ..rules() };
        assert_eq!(reason(&admitted("-5", 10, Some(&r)).await), Some("timestamp_behind"));
        assert_eq!(reason(&admitted("0", 10, Some(&r)).await), None);
    }

    #[tokio::test]
    async fn a_marker_of_another_cluster_is_an_unknown_publisher() {
        let r = rules();
        assert_eq!(reason(&admitted("1000,prod,w-1,3,beat", 1_000, Some(&r)).await), None);
        assert_eq!(
            reason(&admitted("1000,staging,w-1,3,beat", 1_000, Some(&r)).await),
            Some("unknown_publisher")
        );
        let any = InputRules { cluster: None, ..rules() };
        assert_eq!(reason(&admitted("1000,staging,w-1,3,beat", 1_000, Some(&any)).await), None);
    }

    #[tokio::test]
    async fn a_lane_knows_its_publisher_until_a_later_epoch_begins() {
        let r = rules();
        let mut gate: Gate<()> = Gate::new([true]).checking([true], (i64::MAX, i64::MAX));
        let mut offset = 0;
        let mut vet_one = async |gate: &mut Gate<()>, value: &str| {
            offset += 1;
            reason(&vet(gate, 0, (Writer::SOLE, offset), admitted(value, 1_000, Some(&r)).await))
        };
        assert_eq!(
            vet_one(&mut gate, "1000,prod,w-9,2,beat").await,
            None,
            "no BEGIN yet: nothing to compare"
        );
        assert_eq!(vet_one(&mut gate, "1000,prod,w-1,3,begin").await, None, "the first BEGIN is learned");
        assert_eq!(vet_one(&mut gate, "1000,prod,w-1,3,beat").await, None);
        assert_eq!(
            vet_one(&mut gate, "1000,prod,w-2,3,beat").await,
            Some("unknown_publisher"),
            "a forged beat"
        );
        assert_eq!(vet_one(&mut gate, "1000,prod,w-2,9,beat").await, Some("unknown_publisher"), "no BEGIN");
        assert_eq!(
            vet_one(&mut gate, "1000,prod,w-2,3,begin").await,
            Some("unknown_publisher"),
            "same epoch"
        );
        assert_eq!(vet_one(&mut gate, "1000,prod,w-2,4,begin").await, None, "a new leader's epoch");
        assert_eq!(vet_one(&mut gate, "1000,prod,w-2,4,beat").await, None);
        assert_eq!(
            vet_one(&mut gate, "1000,prod,w-1,3,beat").await,
            Some("unknown_publisher"),
            "the old leader"
        );
        assert_eq!(vet_one(&mut gate, "1000").await, None, "an object names no publisher");
    }

    #[tokio::test]
    async fn a_restored_lane_judges_by_the_publisher_its_task_kept() {
        let r = rules();
        let mut gate: Gate<()> = Gate::new([true]).checking([true], (i64::MAX, i64::MAX));
        gate.resume_publisher(0, Writer::SOLE, (4, crate::runtime::clock::Claim::instance_hash("w-2")));
        let forged = admitted("1000,prod,w-1,4,beat", 1_000, Some(&r)).await;
        assert_eq!(reason(&vet(&mut gate, 0, (Writer::SOLE, 7), forged)), Some("unknown_publisher"));
        let known = admitted("1000,prod,w-2,4,beat", 1_000, Some(&r)).await;
        assert_eq!(reason(&vet(&mut gate, 0, (Writer::SOLE, 8), known)), None);
    }
}
