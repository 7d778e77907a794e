//! State stores: typed in-memory maps whose changes are written to a compacted changelog
//! topic in the same transaction as the outputs they led to, and rebuilt from it.
//!
//! In-memory maps, not an embedded database: the state kubefacts keeps is per tracked Job,
//! session or lease, bounded by cleanup decisions (DESIGN §5.2); see `docs/RUNTIME.md` for
//! the figures behind the choice.
//!
//! **Format versions.** Every changelog value starts with the format version of the
//! store's value type (one byte), then its postcard bytes. A store reads values of its
//! current version and, when it declares one ([`KvStore::upgrading_from`]), of the version
//! before it, upgraded as they are restored: an upgrade that changes a state struct
//! restores the state the previous release left, and its first commit rewrites every key it
//! touches in the new format. Keys carry no version: compaction needs a key's bytes never to
//! change, so a new key type is a new store (a new name, a new changelog).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
};

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
    /// A changelog value of a format version this store does not read: written by a newer
    /// release (a rollback past a format change), or by one older than the version before
    /// the current.
    #[error("changelog of store {store} holds a value of format version {found}; this release reads {reads}")]
    UnknownVersion {
        /// The store.
        store: String,
        /// The version byte found.
        found: u8,
        /// The versions read, e.g. `1` or `1 (upgraded) and 2`.
        reads: String,
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
    /// Starts a savepoint: from now on the store remembers each key's value before its
    /// first change, until [`StateStore::rollback`] or [`StateStore::release`] (the runtime
    /// takes one around every record, so a record whose effects cannot be written leaves
    /// no trace).
    fn savepoint(&mut self);
    /// The largest changelog record (key and value bytes) among the keys changed since the
    /// savepoint; 0 when none changed.
    fn largest_change_bytes(&self) -> usize;
    /// Puts every key changed since the savepoint back as it was, and ends the savepoint.
    fn rollback(&mut self);
    /// Keeps the changes made since the savepoint, and ends it.
    fn release(&mut self);
}

/// The format version of every store's values until its value type first changes.
pub const FIRST_VERSION: u8 = 1;

/// Decodes a value of the previous format and upgrades it.
type Upgrade<V> = Arc<dyn Fn(&[u8]) -> Result<V, postcard::Error> + Send + Sync>;

/// A sorted key-value store. Keys and values are serialized with postcard (compact,
/// deterministic: the same key always has the same changelog key bytes); values are
/// prefixed with their format version (module docs).
#[derive(Clone)]
pub struct KvStore<K, V> {
    name: String,
    map: BTreeMap<K, V>,
    dirty: BTreeSet<K>,
    /// The format version values are written in.
    version: u8,
    /// How a value of format `version - 1` is read, if this store reads it.
    previous: Option<Upgrade<V>>,
    /// Inside a savepoint: each key changed since, with its value and whether it was dirty
    /// before its first change ([`StateStore::savepoint`]).
    undo: Option<BTreeMap<K, (Option<V>, bool)>>,
}

impl<K: std::fmt::Debug, V: std::fmt::Debug> std::fmt::Debug for KvStore<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvStore")
            .field("name", &self.name)
            .field("version", &self.version)
            .field("reads_previous", &self.previous.is_some())
            .field("map", &self.map)
            .field("dirty", &self.dirty)
            .finish()
    }
}

impl<K, V> KvStore<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Clone + Serialize + DeserializeOwned + Send,
{
    /// An empty store whose values are of format [`FIRST_VERSION`].
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            map: BTreeMap::new(),
            dirty: BTreeSet::new(),
            version: FIRST_VERSION,
            previous: None,
            undo: None,
        }
    }

    /// The store after its value type changed: values are written in format `version`, and
    /// values of format `version - 1` (type `Old`, the struct as the previous release had
    /// it) are restored through `upgrade`.
    ///
    /// # Panics
    /// When `version` is not above [`FIRST_VERSION`]: there is no version before the first.
    pub fn upgrading_from<Old>(mut self, version: u8, upgrade: fn(Old) -> V) -> Self
    where
        Old: DeserializeOwned + 'static,
        V: 'static,
    {
        assert!(version > FIRST_VERSION, "store {}: format {version} has no previous version", self.name);
        self.version = version;
        self.previous = Some(Arc::new(move |bytes| postcard::from_bytes::<Old>(bytes).map(upgrade)));
        self
    }

    /// The format version this store writes.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The value of `key` (or of a borrowed form of it: `&str` for a `String` key).
    pub fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        self.map.get(key)
    }

    /// Inside a savepoint, keeps what `key` was before its first change.
    fn remember(&mut self, key: &K) {
        if let Some(undo) = &mut self.undo
            && !undo.contains_key(key)
        {
            undo.insert(key.clone(), (self.map.get(key).cloned(), self.dirty.contains(key)));
        }
    }

    /// Sets `key` to `value`.
    pub fn put(&mut self, key: K, value: V) {
        let Some(undo) = &mut self.undo else {
            self.dirty.insert(key.clone());
            self.map.insert(key, value);
            return;
        };
        // Inside a savepoint the value replaced is kept as it is: moved, not cloned.
        let was_dirty = !self.dirty.insert(key.clone());
        let old = self.map.insert(key.clone(), value);
        undo.entry(key).or_insert((old, was_dirty));
    }

    /// The value of `key` to change in place, inserted as the default when absent; a change
    /// like [`KvStore::put`] (without cloning the value out and back in).
    pub fn entry_mut(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.remember(&key);
        self.dirty.insert(key.clone());
        self.map.entry(key).or_default()
    }

    /// The value of `key` to change in place, if present (a change, like a put).
    pub fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        if self.undo.is_some() && self.map.contains_key(key) {
            self.remember(key);
        }
        let v = self.map.get_mut(key)?;
        self.dirty.insert(key.clone());
        Some(v)
    }

    /// Changes the value of `key` in place, if present.
    pub fn update<R>(&mut self, key: &K, f: impl FnOnce(&mut V) -> R) -> Option<R> {
        if self.undo.is_some() && self.map.contains_key(key) {
            self.remember(key);
        }
        let v = self.map.get_mut(key)?;
        self.dirty.insert(key.clone());
        Some(f(v))
    }

    /// Removes `key`.
    pub fn delete<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: Ord + ?Sized,
    {
        // Only a key that was there is marked for its tombstone (and owned for it).
        let (key, old) = self.map.remove_entry(key)?;
        if let Some(undo) = &mut self.undo
            && !undo.contains_key::<K>(&key)
        {
            let was_dirty = self.dirty.contains::<K>(&key);
            undo.insert(key.clone(), (Some(old.clone()), was_dirty));
        }
        self.dirty.insert(key);
        Some(old)
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

/// How many bytes `v`'s postcard form takes.
fn encoded_size<T: Serialize>(v: &T) -> usize {
    postcard::experimental::serialized_size(v).expect("postcard sizes any serde value")
}

/// `prefix` (a format version, or nothing for keys), then `v`'s postcard bytes.
fn encode<T: Serialize>(prefix: Option<u8>, v: &T) -> Vec<u8> {
    // Sized once up front: growing from empty reallocated several times per tracked Job.
    let size = encoded_size(v);
    let mut bytes = Vec::with_capacity(size + 1);
    bytes.extend(prefix);
    postcard::to_extend(v, bytes).expect("postcard serializes any serde value into a Vec")
}

impl<K, V> StateStore for KvStore<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Clone + Serialize + DeserializeOwned + Send,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn take_changes(&mut self) -> Vec<Change> {
        std::mem::take(&mut self.dirty)
            .into_iter()
            .map(|k| {
                let value = self.map.get(&k).map(|v| encode(Some(self.version), v));
                (encode(None, &k), value)
            })
            .collect()
    }

    fn restore(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        let name = &self.name;
        let corrupt = |what| move |source| StoreError::Corrupt { store: name.clone(), what, source };
        let k: K = postcard::from_bytes(key).map_err(corrupt("key"))?;
        match value {
            Some(bytes) => {
                let v: V = match bytes.split_first() {
                    Some((&v, rest)) if v == self.version => postcard::from_bytes(rest),
                    Some((&v, rest)) if v + 1 == self.version && self.previous.is_some() => {
                        (self.previous.as_ref().expect("checked"))(rest)
                    }
                    Some((&found, _)) => return Err(self.unknown_version(found)),
                    None => return Err(self.unknown_version(0)),
                }
                .map_err(corrupt("value"))?;
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

    fn savepoint(&mut self) {
        self.undo = Some(BTreeMap::new());
    }

    fn largest_change_bytes(&self) -> usize {
        (self.undo.iter().flatten())
            .map(|(k, _)| encoded_size(k) + self.map.get(k).map_or(0, |v| 1 + encoded_size(v)))
            .max()
            .unwrap_or(0)
    }

    fn rollback(&mut self) {
        for (k, (old, was_dirty)) in self.undo.take().into_iter().flatten() {
            if !was_dirty {
                self.dirty.remove(&k);
            }
            match old {
                Some(v) => self.map.insert(k, v),
                None => self.map.remove(&k),
            };
        }
    }

    fn release(&mut self) {
        self.undo = None;
    }
}

impl<K, V> KvStore<K, V> {
    fn unknown_version(&self, found: u8) -> StoreError {
        let reads = match self.previous {
            Some(_) => format!("{} (upgraded) and {}", self.version - 1, self.version),
            None => self.version.to_string(),
        };
        StoreError::UnknownVersion { store: self.name.clone(), found, reads }
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
        s.delete("c");
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

    /// A state struct as the previous release wrote it, and as this one does.
    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    struct JobV1 {
        started_ms: i64,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
    struct JobV2 {
        started_ms: i64,
        pods: u32,
    }

    fn upgrade(old: JobV1) -> JobV2 {
        JobV2 { started_ms: old.started_ms, pods: 0 }
    }

    #[test]
    fn values_carry_their_format_version_and_the_previous_one_is_upgraded_on_restore() {
        let mut old: KvStore<String, JobV1> = KvStore::new("jobs");
        old.put("a".into(), JobV1 { started_ms: 7 });
        old.put("b".into(), JobV1 { started_ms: 9 });
        let written = old.take_changes();
        let value = written[0].1.as_deref().unwrap();
        assert_eq!(value[0], FIRST_VERSION, "the version leads the value");
        assert_eq!(&value[1..], postcard::to_allocvec(&JobV1 { started_ms: 7 }).unwrap(), "then postcard");

        // The next release changed the struct: it restores what the previous one left…
        let mut new: KvStore<String, JobV2> = KvStore::new("jobs").upgrading_from(2, upgrade);
        for (k, v) in &written {
            new.restore(k, v.as_deref()).unwrap();
        }
        assert_eq!(new.get("a"), Some(&JobV2 { started_ms: 7, pods: 0 }));
        // … and its own values, written in the new format, restore too.
        new.update(&"b".into(), |j| j.pods = 3);
        let rewritten = new.take_changes();
        assert_eq!(rewritten.len(), 1);
        assert_eq!(rewritten[0].1.as_deref().unwrap()[0], 2);
        for (k, v) in &rewritten {
            new.restore(k, v.as_deref()).unwrap();
        }
        assert_eq!(new.get("b"), Some(&JobV2 { started_ms: 9, pods: 3 }));
    }

    #[test]
    fn a_value_of_a_version_the_store_does_not_read_is_an_error_naming_both() {
        let mut new: KvStore<String, JobV2> = KvStore::new("jobs").upgrading_from(2, upgrade);
        new.put("a".into(), JobV2 { started_ms: 1, pods: 1 });
        let written = new.take_changes();
        // A rollback: the previous release meets a value of the next one.
        let mut old: KvStore<String, JobV1> = KvStore::new("jobs");
        let err = old.restore(&written[0].0, written[0].1.as_deref()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "changelog of store jobs holds a value of format version 2; this release reads 1"
        );
        // A struct changed without a new version is refused as corrupt, not misread.
        let mut v1 = vec![FIRST_VERSION];
        v1.extend(postcard::to_allocvec(&JobV1 { started_ms: 7 }).unwrap());
        let mut unversioned: KvStore<String, JobV2> = KvStore::new("jobs");
        let err = unversioned.restore(&written[0].0, Some(&v1)).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { what: "value", .. }), "{err}");
        let mut upgraded: KvStore<String, JobV2> = KvStore::new("jobs").upgrading_from(2, upgrade);
        let err = upgraded.restore(&written[0].0, Some(&[3, 0])).unwrap_err();
        assert!(err.to_string().ends_with("reads 1 (upgraded) and 2"), "{err}");
    }

    #[test]
    fn a_foreign_changelog_record_is_an_error_not_a_panic() {
        let mut s: KvStore<String, u64> = KvStore::new("counts");
        let err = s.restore(&[0xff, 0xff, 0xff], Some(&[1])).unwrap_err();
        assert!(err.to_string().contains("store counts"), "{err}");
    }
}
