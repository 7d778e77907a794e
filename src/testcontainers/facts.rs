//! Reading a fact topic of a stack: committed records only (`read_committed`), from the
//! beginning, either framing, until enough have arrived.

use std::{
    marker::PhantomData,
    time::{Duration, Instant},
};

use super::{FactRecord, StackError};
use crate::{
    brokers::Brokers,
    codec::{
        Codec,
        json::{Timestamps, to_json},
    },
    runtime::kafka::bystander,
};

/// How long reading a topic to its end may take.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// How records are handed back (chosen by [`super::KubefactsStack::facts`] and
/// [`super::KubefactsStack::fact_records`]).
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub enum Decoding {
    /// Into the fact's Rust type.
    Typed,
    /// As JSON, keys and values, the way `kubefacts replay` writes them.
    Json,
}

/// A reader of one fact topic: [`Facts::wait_for`] reads it from the beginning until `n`
/// records are there. Forwarded stream time (the `kubefacts-heartbeat` header, no value)
/// is left out, as every consumer of our topics leaves it out.
#[derive(Debug)]
pub struct Facts<T> {
    topic: String,
    bootstrap: String,
    codec: Result<Codec, String>,
    decoding: Decoding,
    _t: PhantomData<fn() -> T>,
}

impl<T> Facts<T> {
    pub(crate) fn new(
        topic: String,
        bootstrap: String,
        codec: Result<Codec, String>,
        decoding: Decoding,
    ) -> Self {
        Self { topic, bootstrap, codec, decoding, _t: PhantomData }
    }

    /// The topic's full name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Every committed record now on the topic (an empty list when it does not exist yet),
    /// partition by partition in offset order; tombstones are left out.
    pub async fn all(&self) -> Result<Vec<T>, StackError>
    where
        T: Fact,
    {
        let codec = self.codec.as_ref().map_err(|e| StackError::Registry(e.clone()))?;
        let raw = {
            let (topic, bootstrap) = (self.topic.clone(), self.bootstrap.clone());
            tokio::task::spawn_blocking(move || read_committed(&bootstrap, &topic))
                .await
                .map_err(|e| StackError::Kafka(e.to_string()))??
        };
        let mut out = Vec::with_capacity(raw.len());
        for r in raw {
            out.push(T::decode(codec, r.key.as_deref(), &r.value, self.decoding).await?);
        }
        Ok(out)
    }

    /// Every committed record now on the topic as the broker holds it: the bytes a consumer
    /// under test reads (Confluent framing, magic byte 0 and a schema id, with a registry;
    /// Avro single-object encoding, `C3 01`, without).
    pub async fn raw(&self) -> Result<Vec<RawRecord>, StackError> {
        let (topic, bootstrap) = (self.topic.clone(), self.bootstrap.clone());
        let raw = tokio::task::spawn_blocking(move || read_committed(&bootstrap, &topic))
            .await
            .map_err(|e| StackError::Kafka(e.to_string()))??;
        Ok(raw)
    }

    /// Waits until the topic holds at least `n` committed records, then returns all of
    /// them; fails after `timeout` saying how many there were.
    pub async fn wait_for(&self, n: usize, timeout: Duration) -> Result<Vec<T>, StackError>
    where
        T: Fact,
    {
        let deadline = Instant::now() + timeout;
        loop {
            let got = self.all().await?;
            if got.len() >= n {
                return Ok(got);
            }
            if Instant::now() > deadline {
                return Err(StackError::Timeout {
                    what: format!("{n} records on {} (there are {})", self.topic, got.len()),
                    tail: String::new(),
                });
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// One record's bytes ([`Facts::raw`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Vec<u8>,
}

/// What a [`Facts`] reader can hand back: a fact's Rust type, or a [`FactRecord`].
#[allow(async_fn_in_trait)]
pub trait Fact: Sized {
    #[doc(hidden)]
    async fn decode(
        codec: &Codec,
        key: Option<&[u8]>,
        value: &[u8],
        decoding: Decoding,
    ) -> Result<Self, StackError>;
}

impl<T: serde::de::DeserializeOwned> Fact for T {
    async fn decode(
        codec: &Codec,
        key: Option<&[u8]>,
        value: &[u8],
        decoding: Decoding,
    ) -> Result<Self, StackError> {
        match decoding {
            Decoding::Typed => Ok(codec.decode_as(value).await?),
            // FactRecord is DeserializeOwned too: built from JSON.
            Decoding::Json => {
                let value = to_json(&codec.decode(value).await?.value, Timestamps::Rfc3339);
                let key = match key {
                    // Avro keys (single-object or Confluent framed) decode like values.
                    Some(k) if k.starts_with(&[0xC3, 0x01]) || (k.len() > 5 && k[0] == 0) => {
                        to_json(&codec.decode(k).await?.value, Timestamps::Rfc3339)
                    }
                    Some(k) => serde_json::Value::String(String::from_utf8_lossy(k).into_owned()),
                    None => serde_json::Value::Null,
                };
                let record = FactRecord { key, value };
                serde_json::from_value(serde_json::to_value(record).expect("JSON values serialize"))
                    .map_err(|e| StackError::Kafka(format!("not a fact record: {e}")))
            }
        }
    }
}

/// Every committed record of `topic` with a value (no tombstone, no forwarded stream time),
/// partition then offset; none when the topic does not exist yet.
fn read_committed(bootstrap: &str, topic: &str) -> Result<Vec<RawRecord>, StackError> {
    let records =
        bystander::read_to_end(Brokers::plaintext(bootstrap).client(), "stack-reader", topic, READ_TIMEOUT)
            .map_err(|e| StackError::Kafka(e.to_string()))?
            .unwrap_or_default();
    // Forwarded stream time has no value either, so this leaves it out with the tombstones.
    Ok(records.into_iter().filter_map(|r| Some(RawRecord { key: r.key, value: r.value? })).collect())
}
