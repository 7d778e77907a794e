//! Which images a stack runs: the names a user pulls by default, overridable in code and by
//! environment variables (docs/TESTING_DOWNSTREAM.md, "The images").

/// The Apache Kafka image (KRaft, the official image's `KAFKA_*` environment convention).
pub const DEFAULT_KAFKA_IMAGE: &str = "apache/kafka:4.4.0";
/// The schema registry image (Apicurio Registry, Confluent-compatible API).
pub const DEFAULT_REGISTRY_IMAGE: &str = "apicurio/apicurio-registry:3.3.3";
/// kubefacts' image (`deploy/image/Dockerfile`), tagged with this crate's version.
pub const DEFAULT_KUBEFACTS_IMAGE: &str = concat!("kubefacts:", env!("CARGO_PKG_VERSION"));

/// Environment variable that overrides [`DEFAULT_KAFKA_IMAGE`].
pub const KAFKA_IMAGE_ENV: &str = "KUBEFACTS_KAFKA_IMAGE";
/// Environment variable that overrides [`DEFAULT_REGISTRY_IMAGE`].
pub const REGISTRY_IMAGE_ENV: &str = "KUBEFACTS_REGISTRY_IMAGE";
/// Environment variable that overrides [`DEFAULT_KUBEFACTS_IMAGE`].
pub const KUBEFACTS_IMAGE_ENV: &str = "KUBEFACTS_IMAGE";

/// The three images of a stack, as `name:tag`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// Kafka.
    pub kafka: String,
    /// The schema registry.
    pub registry: String,
    /// kubefacts.
    pub kubefacts: String,
}

impl Images {
    /// The defaults, each replaced by its environment variable when that is set and not
    /// empty.
    pub fn from_env() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// [`Images::from_env`] over any lookup (testable without touching the environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let pick = |env: &str, default: &str| {
            lookup(env).filter(|v| !v.trim().is_empty()).unwrap_or_else(|| default.to_owned())
        };
        Self {
            kafka: pick(KAFKA_IMAGE_ENV, DEFAULT_KAFKA_IMAGE),
            registry: pick(REGISTRY_IMAGE_ENV, DEFAULT_REGISTRY_IMAGE),
            kubefacts: pick(KUBEFACTS_IMAGE_ENV, DEFAULT_KUBEFACTS_IMAGE),
        }
    }
}

/// `name:tag` split at the tag's colon (a registry host's port is not a tag); `latest`
/// when there is none.
pub(crate) fn split(image: &str) -> (&str, &str) {
    match image.rsplit_once(':') {
        Some((name, tag)) if !tag.contains('/') => (name, tag),
        _ => (image, "latest"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_overridden_by_non_empty_variables() {
        let images = Images::from_lookup(|name| match name {
            KAFKA_IMAGE_ENV => Some("local/kafka:1".into()),
            REGISTRY_IMAGE_ENV => Some("  ".into()),
            _ => None,
        });
        assert_eq!(images.kafka, "local/kafka:1");
        assert_eq!(images.registry, DEFAULT_REGISTRY_IMAGE);
        assert_eq!(images.kubefacts, DEFAULT_KUBEFACTS_IMAGE);
    }

    #[test]
    fn names_split_at_the_tag_not_at_a_registry_port() {
        assert_eq!(split("apache/kafka:4.1.0"), ("apache/kafka", "4.1.0"));
        assert_eq!(split("registry.local:5000/kafka"), ("registry.local:5000/kafka", "latest"));
        assert_eq!(split("registry.local:5000/kafka:7"), ("registry.local:5000/kafka", "7"));
    }
}
