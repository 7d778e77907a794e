//! The label and annotation keys decoding keeps, and the metadata decoder that keeps them.
//!
//! Which keys matter is configuration (`[minimize]` and `[admission]`), but kube-rs decodes
//! with `DeserializeOwned`, which takes no argument. So the keys travel in a thread-local
//! set around the decoding call ([`keeping`]); a map outside any scope keeps every key —
//! correct, only not minimal — so forgetting a scope can never drop an opt-out annotation.

use std::{cell::RefCell, collections::BTreeMap, fmt, sync::Arc};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{
    Deserialize, Deserializer,
    de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor},
};

/// The label and annotation keys decoding keeps: the values of every other key are skipped
/// by the parser and never held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeptKeys {
    /// Label keys kept.
    pub labels: Vec<String>,
    /// Annotation keys kept.
    pub annotations: Vec<String>,
}

thread_local! {
    static KEPT: RefCell<Option<Arc<KeptKeys>>> = const { RefCell::new(None) };
}

/// Runs `decode` with `keys` as the keys kept by every label and annotation map it
/// decodes on this thread (scopes nest; the previous one is back afterwards).
pub fn keeping<T>(keys: &Arc<KeptKeys>, decode: impl FnOnce() -> T) -> T {
    struct Restore(Option<Arc<KeptKeys>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let previous = self.0.take();
            KEPT.with(|k| *k.borrow_mut() = previous);
        }
    }
    let _restore = Restore(KEPT.with(|k| k.replace(Some(Arc::clone(keys)))));
    decode()
}

#[derive(Clone, Copy)]
enum Which {
    Labels,
    Annotations,
}

/// A label or annotation map holding only the kept keys; `null` is `None`, as in
/// k8s-openapi.
fn kept_map<'de, D: Deserializer<'de>>(
    d: D,
    which: Which,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    struct MapVisitor(Option<Arc<KeptKeys>>, Which);
    impl<'de> Visitor<'de> for MapVisitor {
        type Value = Option<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let keys = self.0.as_deref().map(|k| match self.1 {
                Which::Labels => k.labels.as_slice(),
                Which::Annotations => k.annotations.as_slice(),
            });
            let mut out = BTreeMap::new();
            while let Some(key) = map.next_key_seed(KeySeed(keys))? {
                match key {
                    Some(key) => {
                        out.insert(key, map.next_value::<String>()?);
                    }
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(out))
        }
    }
    let kept = KEPT.with(|k| k.borrow().clone());
    d.deserialize_option(MapVisitor(kept, which))
}

/// A map key: `Some` (owned) when kept, `None` when its value is to be skipped. Compared
/// borrowed, so a skipped key allocates nothing either.
struct KeySeed<'k>(Option<&'k [String]>);

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = Option<String>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = Option<String>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a string key")
    }
    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        let kept = self.0.is_none_or(|keys| keys.iter().any(|k| k == key));
        Ok(kept.then(|| key.to_owned()))
    }
}

fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    kept_map(d, Which::Labels)
}

fn annotations<'de, D: Deserializer<'de>>(d: D) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    kept_map(d, Which::Annotations)
}

/// `metadata` as the allowlist reads it (identity, times, kept labels and annotations,
/// owner references without their `apiVersion`); every other field is skipped.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Meta {
    name: Option<String>,
    namespace: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    #[serde(default, deserialize_with = "super::time::opt")]
    creation_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "super::time::opt")]
    deletion_timestamp: Option<Time>,
    #[serde(default, deserialize_with = "labels")]
    labels: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "annotations")]
    annotations: Option<BTreeMap<String, String>>,
    owner_references: Option<Vec<Owner>>,
}

/// An owner reference's fields the allowlist reads.
#[derive(Deserialize)]
struct Owner {
    kind: String,
    name: String,
    uid: String,
    controller: Option<bool>,
}

impl From<Meta> for ObjectMeta {
    fn from(m: Meta) -> Self {
        ObjectMeta {
            name: m.name,
            namespace: m.namespace,
            uid: m.uid,
            resource_version: m.resource_version,
            creation_timestamp: m.creation_timestamp,
            deletion_timestamp: m.deletion_timestamp,
            labels: m.labels,
            annotations: m.annotations,
            owner_references: m.owner_references.map(|refs| {
                refs.into_iter()
                    .map(|o| OwnerReference {
                        kind: o.kind,
                        name: o.name,
                        uid: o.uid,
                        controller: o.controller,
                        ..Default::default()
                    })
                    .collect()
            }),
            ..Default::default()
        }
    }
}

/// Decodes `metadata` keeping only the allowlisted fields (absent or `null`: empty, as
/// k8s-openapi reads it). The result is k8s-openapi's `ObjectMeta` because kube-rs reads
/// the resource version through it; every field not listed on [`Meta`] stays `None`.
pub(super) fn allowlisted<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    Ok(Option::<Meta>::deserialize(d)?.map(ObjectMeta::from).unwrap_or_default())
}

/// [`allowlisted`] for an optional `metadata` (a template's).
pub(super) fn allowlisted_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Box<ObjectMeta>>, D::Error> {
    Ok(Option::<Meta>::deserialize(d)?.map(|m| Box::new(ObjectMeta::from(m))))
}
