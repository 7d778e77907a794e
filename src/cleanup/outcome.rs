//! Typed mirror of `schemas/cleanup-outcome.avsc`: what `kubefacts cleaner` did with one
//! decision, on `cleanup-outcomes.v1` (key: Job UID).

use serde::{Deserialize, Serialize};

use super::model::JobRef;

/// What the cleaner did with a decision (`io.kubefacts.v1.CleanupOutcomeKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum CleanupOutcomeKind {
    /// A value this reader does not know.
    #[default]
    Unknown,
    /// A DELETE with the UID precondition and background propagation was accepted.
    Deleted,
    /// No Job by that name, or it is already being deleted: nothing (more) to do.
    AlreadyGone,
    /// A Job with that name exists with another UID (re-created): left alone.
    PreconditionFailed,
    /// The API server answered 403.
    Forbidden,
    /// The API failed for good (retries exhausted, or an unexpected status).
    Error,
    /// Dry run: an applying cleaner would delete the Job.
    WouldDelete,
}

impl CleanupOutcomeKind {
    /// Every symbol, in schema order.
    pub const ALL: [Self; 7] = [
        Self::Unknown,
        Self::Deleted,
        Self::AlreadyGone,
        Self::PreconditionFailed,
        Self::Forbidden,
        Self::Error,
        Self::WouldDelete,
    ];

    /// A bounded, lower-case label (logs and the `kubefacts_processor_events_total` event).
    pub fn label(self) -> &'static str {
        match self {
            Self::Unknown => "unknown",
            Self::Deleted => "deleted",
            Self::AlreadyGone => "already_gone",
            Self::PreconditionFailed => "precondition_failed",
            Self::Forbidden => "forbidden",
            Self::Error => "error",
            Self::WouldDelete => "would_delete",
        }
    }
}

/// One decision's outcome (`io.kubefacts.v1.CleanupOutcome`, key: Job UID).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CleanupOutcome {
    /// The Job the decision named.
    pub job: JobRef,
    /// What happened.
    pub outcome: CleanupOutcomeKind,
    /// Written by a dry run (nothing deleted).
    pub dry_run: bool,
    /// Why, from a fixed vocabulary plus HTTP status and reason codes; never an API message.
    pub detail: String,
    /// HTTP status of the last API response, if one arrived.
    pub http_status: Option<i32>,
    /// GET and DELETE requests sent, retries included.
    pub api_requests: i32,
    /// The decision's sweep.
    pub sweep: i64,
    /// The decision's decided_at (stream time), epoch ms.
    pub decided_at: i64,
    /// Partition of the decision.
    pub decision_partition: i32,
    /// Offset of the decision.
    pub decision_offset: i64,
    /// Wall clock when the cleaner began applying the decision, epoch ms.
    pub attempted_at: i64,
    /// The cleaner instance.
    pub instance: String,
}

impl CleanupOutcome {
    /// Full name of the Avro record.
    pub const FULL_NAME: &str = "io.kubefacts.v1.CleanupOutcome";
}

#[cfg(test)]
mod tests {
    use serde_json::Value as Json;

    use super::*;
    use crate::codec::{Codec, Framing, RecordWriter};

    fn outcome() -> CleanupOutcome {
        CleanupOutcome {
            job: JobRef {
                namespace: "batch".into(),
                name: "nightly-29000000".into(),
                uid: "6f1c9a52-3d2e-4b8e-9a51-0c7f7d3f2a10".into(),
            },
            outcome: CleanupOutcomeKind::PreconditionFailed,
            dry_run: false,
            detail: "delete: 409 Conflict".into(),
            http_status: Some(409),
            api_requests: 2,
            sweep: 7,
            decided_at: 1_795_946_400_000,
            decision_partition: 2,
            decision_offset: 41,
            attempted_at: 1_795_946_401_250,
            instance: "cleaner-0".into(),
        }
    }

    #[tokio::test]
    async fn an_outcome_round_trips_through_the_current_schema() {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(CleanupOutcome::FULL_NAME).unwrap();
        let writer =
            RecordWriter::new(known, Framing::SingleObject { fingerprint: known.fingerprint }).unwrap();
        for o in [outcome(), CleanupOutcome { http_status: None, ..outcome() }] {
            let bytes = writer.encode(&o).unwrap();
            let back: CleanupOutcome = codec.decode_as(&bytes).await.unwrap();
            assert_eq!(back, o);
        }
    }

    #[test]
    fn the_rust_model_mirrors_the_schema() {
        let codec = Codec::new(None).unwrap();
        let known = codec.schemas().current(CleanupOutcome::FULL_NAME).unwrap();
        let schema: Json = serde_json::from_str(&known.text).unwrap();
        let fields: Vec<&str> =
            schema["fields"].as_array().unwrap().iter().map(|f| f["name"].as_str().unwrap()).collect();
        let value = serde_json::to_value(outcome()).unwrap();
        let ours: Vec<&str> = value.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(ours, fields, "field names and order");
        let kind = schema["fields"].as_array().unwrap().iter().find(|f| f["name"] == "outcome").unwrap();
        let symbols: Vec<String> = CleanupOutcomeKind::ALL
            .iter()
            .map(|k| serde_json::to_value(k).unwrap().as_str().unwrap().to_owned())
            .collect();
        assert_eq!(Json::from(symbols), kind["type"]["symbols"], "enum symbols and order");
    }
}
