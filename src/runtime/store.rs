//! State stores: typed in-memory maps whose changes are written to a compacted changelog
//! topic in the same transaction as the outputs they led to, and rebuilt from it.
//!
//! In-memory maps, not an embedded database: the state kubefacts keeps is per tracked Job,
//! session or lease, bounded by cleanup decisions (DESIGN §5.2); see `docs/RUNTIME.md` for
//! the figures behind the choice.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, de::DeserializeOwned};
use thiserror::Error;

/// A change to write to a store's changelog: key bytes and value bytes (`None` deletes).
pub type Change = (Vec<u8>, Option<Vec<u8>>);

/// Why a changelog record could not be applied to a store.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A changelog key or value does not decode as the store's types (written by an
    /// incompatible version, or not a changelog of this store).
    #[error("changelog of store {store} holds an undecodable {what}: {source}")]
    Corrupt {
        /// The store.
        store: String,
        /// `key` or `value`.
        what: &'static str,
        /// The decoding error.
        #[source]
        source: postcard::Error,
    },
}

/// What the runtime needs of any store: drain changes, restore from the changelog.
pub trait StateStore: Send {
    /// The store's name (part of its changelog topic name).
    fn name(&self) -> &str;
    /// The changes since the last call, one per key changed (the latest value), in key
    /// order: what goes to the changelog with the transaction.
    fn take_changes(&mut self) -> Vec<Change>;
    /// Applies one changelog record during restore.
    fn restore(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError>;
    /// Entries held.
    fn len(&self) -> usize;
    /// Whether the store is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A sorted key-value store. Keys and values are serialized with postcard (compact,
/// deterministic: the same key always has the same changelog key bytes).
#[derive(Debug, Clone)]
pub struct KvStore<K, V> {
    name: String,
    map: BTreeMap<K, V>,
    dirty: BTreeSet<K>,
}

impl<K, V> KvStore<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Serialize + DeserializeOwned + Send,
{
    /// An empty store.
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into(), map: BTreeMap::new(), dirty: BTreeSet::new() }
    }

    /// The value of `key` (or of a borrowed form of it: `&str` for a `String` key).
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key)
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: K, value: V) {
        self.dirty.insert(key.clone());
        self.map.insert(key, value);
    }

    /// The value of `key` to change in place, inserted as the default when absent; a change
    /// like [`KvStore::put`] (without cloning the value out and back in).
    pub fn entry_mut(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.dirty.insert(key.clone());
        self.map.entry(key).or_default()
    }

    /// The value of `key` to change in place, if present (a change, like a put).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        let v = self.map.get_mut(key)?;
        self.dirty.insert(key.clone());
        Some(v)
    }

    /// Changes the value of `key` in place, if present.
    pub fn update<R>(&mut self, key: &K, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        let v = self.map.get_mut(key)?;
        self.dirty.insert(key.clone());
        Some(f(v))
    }

    /// Removes `key`.
    pub fn delete(&mut self, key: &K) -> Option<V> {
        let old = self.map.remove(key);
        if old.is_some() {
            self.dirty.insert(key.clone());
        }
        old
    }

    /// All entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.map.iter()
    }

    /// The entries whose keys fall in `range`, in key order.
    pub fn range<R: std::ops::RangeBounds<K>>(&self, range: R) -> impl DoubleEndedIterator<Item = (&K, &V)> {
        self.map.range(range)
    }
}

fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    // Sized once up front: growing from empty reallocated several times per tracked Job.
    let size = postcard::experimental::serialized_size(v).expect("postcard sizes any serde value");
    postcard::to_extend(v, Vec::with_capacity(size)).expect("postcard serializes any serde value into a Vec")
}

impl<K, V> StateStore for KvStore<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Serialize + DeserializeOwned + Send,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|k| (encode(&k), self.map.get(&k).map(encode)))
            .collect()
    }

    fn restore(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let name = &self.name;
        let corrupt = |what| move |source| StoreError::Corrupt { store: name.clone(), what, source };
        let k: K = postcard::from_bytes(key).map_err(corrupt("key"))?;
        match value {
            Some(bytes) => {
                let v: V = postcard::from_bytes(bytes).map_err(corrupt("value"))?;
                self.map.insert(k, v);
            }
            None => {
                self.map.remove(&k);
            }
        }
        Ok(())
    }

    fn len(&self) -> usize {
        self.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_one_per_key_latest_value_and_restore_rebuilds_the_map() {
        let mut s: KvStore<String, u64> = KvStore::new("counts");
        s.put("b".into(), 1);
        s.put("a".into(), 1);
        s.update(&"b".into(), |v| *v += 1);
        s.put("c".into(), 9);
        s.delete(&"c".into());
        let changes = s.take_changes();
        assert_eq!(changes.len(), 3, "a, b and c once each");
        assert!(s.take_changes().is_empty(), "drained");

        let mut restored: KvStore<String, u64> = KvStore::new("counts");
        for (k, v) in &changes {
            restored.restore(k, v.as_deref()).unwrap();
        }
        assert_eq!(restored.iter().collect::<Vec<_>>(), s.iter().collect::<Vec<_>>());
        assert_eq!(restored.get("b"), Some(&2));
        assert!(restored.take_changes().is_empty(), "restoring is not a change");
    }

    #[test]
    fn a_foreign_changelog_record_is_an_error_not_a_panic() {
        let mut s: KvStore<String, u64> = KvStore::new("counts");
        let err = s.restore(&[0xff, 0xff, 0xff], Some(&[1])).unwrap_err();
        assert!(err.to_string().contains("store counts"), "{err}");
    }
}
