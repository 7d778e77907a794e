//! The snapshot-epoch rule, once: after SNAPSHOT_END of epoch `E`, an object whose latest
//! observation has an epoch below `E` was not re-listed by that relist, so it is gone
//! (deleted while unobserved).
//!
//! [`EpochTable`] is a [`KvStore`] whose values carry their epoch ([`Epoched`]) and which
//! answers which entries a SNAPSHOT_END ends. Its changelog is its inner store's, record for
//! record (same name, same postcard keys and values), so state written before it existed
//! restores unchanged.

use std::{
    collections::BTreeMap,
    ops::{Deref, DerefMut},
};

use serde::{Serialize, de::DeserializeOwned};

use super::store::{Change, KvStore, StateStore, StoreError};

/// A value that remembers the snapshot epoch of its object's latest observation.
pub trait Epoched {
    /// That epoch; `None` when the object itself was never observed (only what refers to
    /// it was), which any relist ends.
    fn epoch(&self) -> Option<i64>;
}

/// Whether a SNAPSHOT_END of `epoch` ends `value`: it was not re-listed by that relist.
pub fn ended_by<V: Epoched + ?Sized>(value: &V, epoch: i64) -> bool {
    value.epoch().is_none_or(|e| e < epoch)
}

/// The keys of `entries` a SNAPSHOT_END of `epoch` ends, among those `keep` admits, in the
/// order given (key order for a map).
pub fn unlisted<'a, K: 'a, V: Epoched + 'a>(
    entries: impl IntoIterator<Item = (&'a K, &'a V)>,
    epoch: i64,
    mut keep: impl FnMut(&K, &V) -> bool,
) -> impl Iterator<Item = &'a K> {
    entries.into_iter().filter(move |(k, v)| keep(k, v) && ended_by(*v, epoch)).map(|(k, _)| k)
}

/// A changelogged store of objects subject to the snapshot-epoch rule. Reads and writes as
/// the [`KvStore`] it wraps.
#[derive(Debug, Clone)]
pub struct EpochTable<K, V> {
    store: KvStore<K, V>,
}

impl<K, V> EpochTable<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Clone + Serialize + DeserializeOwned + Send,
{
    /// An empty table whose changelog is that of a [`KvStore`] named `name`.
    pub fn new(name: impl Into<String>) -> Self {
        Self { store: KvStore::new(name) }
    }

    /// The table after its value type changed ([`KvStore::upgrading_from`]).
    pub fn upgrading_from<Old>(self, version: u8, upgrade: fn(Old) -> V) -> Self
    where
        Old: DeserializeOwned + 'static,
        V: 'static,
    {
        Self { store: self.store.upgrading_from(version, upgrade) }
    }

    /// The keys a SNAPSHOT_END of `epoch` ends, in key order.
    pub fn unlisted(&self, epoch: i64) -> Vec<K>
    where
        V: Epoched,
    {
        self.unlisted_where(epoch, |_, _| true)
    }

    /// The keys a SNAPSHOT_END of `epoch` ends among those `keep` admits (the relist's
    /// partition, say), in key order.
    pub fn unlisted_where(&self, epoch: i64, keep: impl FnMut(&K, &V) -> bool) -> Vec<K>
    where
        V: Epoched,
    {
        unlisted(self.store.iter(), epoch, keep).cloned().collect()
    }

    /// For values holding several objects (`objects` of each value, by their own keys):
    /// per entry with any object a SNAPSHOT_END of `epoch` ends among those `keep` admits,
    /// the entry's key and those objects' keys, both in key order.
    pub fn unlisted_within<K2, V2>(
        &self,
        epoch: i64,
        objects: impl Fn(&V) -> &BTreeMap<K2, V2>,
        mut keep: impl FnMut(&K2, &V2) -> bool,
    ) -> Vec<(K, Vec<K2>)>
    where
        K2: Clone,
        V2: Epoched,
    {
        self.store
            .iter()
            .filter_map(|(k, v)| {
                let ended: Vec<K2> = unlisted(objects(v), epoch, &mut keep).cloned().collect();
                (!ended.is_empty()).then(|| (k.clone(), ended))
            })
            .collect()
    }
}

impl<K, V> Deref for EpochTable<K, V> {
    type Target = KvStore<K, V>;

    fn deref(&self) -> &KvStore<K, V> {
        &self.store
    }
}

impl<K, V> DerefMut for EpochTable<K, V> {
    fn deref_mut(&mut self) -> &mut KvStore<K, V> {
        &mut self.store
    }
}

impl<K, V> StateStore for EpochTable<K, V>
where
    K: Ord + Clone + Serialize + DeserializeOwned + Send,
    V: Clone + Serialize + DeserializeOwned + Send,
{
    fn name(&self) -> &str {
        self.store.name()
    }

    fn take_changes(&mut self) -> Vec<Change> {
        self.store.take_changes()
    }

    fn restore(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), StoreError> {
        self.store.restore(key, value)
    }

    fn len(&self) -> usize {
        StateStore::len(&self.store)
    }

    fn savepoint(&mut self) {
        self.store.savepoint();
    }

    fn largest_change_bytes(&self) -> usize {
        self.store.largest_change_bytes()
    }

    fn rollback(&mut self) {
        self.store.rollback();
    }

    fn release(&mut self) {
        self.store.release();
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Obj {
        epoch: Option<i64>,
        part: i32,
    }

    impl Epoched for Obj {
        fn epoch(&self) -> Option<i64> {
            self.epoch
        }
    }

    fn obj(epoch: i64, part: i32) -> Obj {
        Obj { epoch: Some(epoch), part }
    }

    #[test]
    fn an_older_epoch_ends_an_equal_or_newer_one_does_not() {
        let mut t: EpochTable<String, Obj> = EpochTable::new("t");
        t.put("older".into(), obj(4, 0));
        t.put("equal".into(), obj(5, 0));
        t.put("newer".into(), obj(6, 0));
        t.put("never".into(), Obj { epoch: None, part: 0 });
        assert_eq!(t.unlisted(5), ["never", "older"]);
        assert_eq!(t.unlisted(i64::MIN), ["never"], "unobserved objects end with any relist");
        assert!(ended_by(&obj(4, 0), 5) && !ended_by(&obj(5, 0), 5) && !ended_by(&obj(6, 0), 5));
    }

    #[test]
    fn keys_come_in_key_order_and_the_filter_narrows_them() {
        let mut t: EpochTable<(i64, String), Obj> = EpochTable::new("t");
        for (i, k) in ["d", "b", "c", "a"].into_iter().enumerate() {
            t.put((1, k.into()), obj(1, i as i32 % 2));
            t.put((0, k.into()), obj(9, 0));
        }
        let all: Vec<String> = t.unlisted(2).into_iter().map(|(_, k)| k).collect();
        assert_eq!(all, ["a", "b", "c", "d"]);
        let even: Vec<String> = t.unlisted_where(2, |_, v| v.part == 0).into_iter().map(|(_, k)| k).collect();
        assert_eq!(even, ["c", "d"]);
        let by_key = t.unlisted_where(2, |(_, k), _| k == "b");
        assert_eq!(by_key, [(1, "b".to_owned())]);
    }

    #[test]
    fn nested_objects_are_ended_per_entry_in_key_order() {
        let mut t: EpochTable<String, BTreeMap<String, Obj>> = EpochTable::new("t");
        t.put("s2".into(), BTreeMap::from([("p9".into(), obj(1, 0)), ("p1".into(), obj(1, 1))]));
        t.put("s1".into(), BTreeMap::from([("p5".into(), obj(3, 0)), ("p4".into(), obj(1, 0))]));
        t.put("s0".into(), BTreeMap::from([("p0".into(), obj(3, 0))]));
        let ended = t.unlisted_within(3, |v| v, |_, _| true);
        assert_eq!(
            ended,
            [
                ("s1".to_owned(), vec!["p4".to_owned()]),
                ("s2".to_owned(), vec!["p1".to_owned(), "p9".to_owned()])
            ]
        );
        let kept = t.unlisted_within(3, |v| v, |_, p| p.part == 1);
        assert_eq!(kept, [("s2".to_owned(), vec!["p1".to_owned()])]);
    }

    #[test]
    fn the_changelog_is_the_inner_stores_byte_for_byte() {
        let mut t: EpochTable<String, Obj> = EpochTable::new("jobs");
        let mut kv: KvStore<String, Obj> = KvStore::new("jobs");
        for s in [&mut *t, &mut kv] {
            s.put("b".into(), obj(2, 1));
            s.put("a".into(), obj(1, 0));
            s.update(&"b".into(), |v| v.epoch = Some(3));
            s.put("c".into(), obj(1, 0));
            s.delete("c");
        }
        let changes = t.take_changes();
        assert_eq!(changes, kv.take_changes());
        assert_eq!(StateStore::name(&t), "jobs");

        let mut restored: EpochTable<String, Obj> = EpochTable::new("jobs");
        for (k, v) in &changes {
            restored.restore(k, v.as_deref()).unwrap();
        }
        assert_eq!(restored.iter().collect::<Vec<_>>(), t.iter().collect::<Vec<_>>());
        assert_eq!(StateStore::len(&restored), 2);
    }
}
