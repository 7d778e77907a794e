//! The `[kafka]` section: how every kubefacts client reaches the brokers — TLS, SASL, and
//! any other librdkafka property — in one place, so each verb connects the same way.
//!
//! Secrets are never values in this section: a password names the file it is mounted
//! at (a Kubernetes Secret volume) or the environment variable holding it, and is read
//! only when a client is built. The configuration itself can therefore be printed,
//! compared and logged; the secret is a [`Secret`], whose `Debug` and `Display` say
//! `[redacted]`, and no error of this module carries it.

use std::{collections::BTreeMap, path::PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

pub use crate::brokers::Brokers;

/// librdkafka properties kubefacts sets itself for its guarantees (exactly once, the
/// idempotent watcher, the consumer groups): a pass-through may not change them.
pub const RESERVED_PROPERTIES: &[&str] = &[
    "bootstrap.servers",
    "group.id",
    "group.instance.id",
    "transactional.id",
    "enable.idempotence",
    "acks",
    "isolation.level",
    "enable.auto.commit",
    "enable.auto.offset.store",
    "auto.offset.reset",
    "partition.assignment.strategy",
];

/// librdkafka properties that hold secrets: they come from [`SecretSource`]s only, never
/// as a plain value in the pipeline file.
pub const SECRET_PROPERTIES: &[&str] = &[
    "sasl.password",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl.truststore.password",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.config",
];

/// Why the `[kafka]` section cannot be used. No variant holds a secret's value.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum KafkaConfigError {
    /// A pass-through property is one kubefacts sets itself.
    #[error("[kafka.properties] {key}: kubefacts sets this property itself ({why}); remove it")]
    Reserved {
        /// The property.
        key: String,
        /// What kubefacts uses it for.
        why: &'static str,
    },
    /// A pass-through property is also set by a typed field of `[kafka]`.
    #[error("[kafka.properties] {key}: conflicts with [kafka] {field}; set it in one place")]
    Conflict {
        /// The property.
        key: String,
        /// The typed field that sets it.
        field: &'static str,
    },
    /// A pass-through property holds a secret as plain text.
    #[error(
        "[kafka.properties] {key}: a secret is never a value in the pipeline file; use the \
         [kafka] field that reads it from a file or the environment"
    )]
    SecretInline {
        /// The property.
        key: String,
    },
    /// librdkafka does not accept a property (unknown name, or a value of the wrong kind).
    #[error("[kafka] {key}: librdkafka refuses it: {reason}")]
    Refused {
        /// The property.
        key: String,
        /// librdkafka's reason (never the value: it could be a secret).
        reason: String,
    },
    /// A combination of settings that cannot work.
    #[error("[kafka] {field}: {reason}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// Why.
        reason: String,
    },
    /// A secret could not be read from where it was said to be.
    #[error("[kafka] {field}: cannot read the secret from {source_name}: {reason}")]
    SecretUnreadable {
        /// The field.
        field: &'static str,
        /// `file <path>` or `environment variable <NAME>`.
        source_name: String,
        /// Why (an I/O error, or the variable being unset or empty).
        reason: String,
    },
}

/// How clients reach the brokers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SecurityProtocol {
    /// No TLS, no authentication (the single loopback broker of the fast tests).
    #[default]
    Plaintext,
    /// TLS, no SASL (a client certificate may authenticate).
    Ssl,
    /// SASL without TLS (credentials in clear on the wire: for loopback only).
    SaslPlaintext,
    /// SASL over TLS: what managed and production clusters use.
    SaslSsl,
}

impl SecurityProtocol {
    fn name(self) -> &'static str {
        match self {
            Self::Plaintext => "plaintext",
            Self::Ssl => "ssl",
            Self::SaslPlaintext => "sasl_plaintext",
            Self::SaslSsl => "sasl_ssl",
        }
    }

    fn tls(self) -> bool {
        matches!(self, Self::Ssl | Self::SaslSsl)
    }

    fn sasl(self) -> bool {
        matches!(self, Self::SaslPlaintext | Self::SaslSsl)
    }
}

/// Where a secret is read from when a client is built: exactly one of the two. Written
/// as a table (`{ file = "…" }`); anything else is refused without echoing it, since a
/// string there is most likely the secret itself.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SecretSource {
    /// A file holding the secret (trailing newlines are dropped), as a Kubernetes Secret
    /// is mounted.
    pub file: Option<PathBuf>,
    /// An environment variable holding the secret.
    pub env: Option<String>,
}

impl<'de> Deserialize<'de> for SecretSource {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct Fields {
            file: Option<PathBuf>,
            env: Option<String>,
        }
        struct Table;
        const NOT_A_TABLE: &str = "a secret is never a value in the pipeline file: write \
            { file = \"<path>\" } or { env = \"<VARIABLE>\" } (the value given is not shown)";
        impl<'de> serde::de::Visitor<'de> for Table {
            type Value = SecretSource;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("{ file = \"<path>\" } or { env = \"<VARIABLE>\" }")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<SecretSource, A::Error> {
                let f = Fields::deserialize(serde::de::value::MapAccessDeserializer::new(map))?;
                Ok(SecretSource { file: f.file, env: f.env })
            }
            fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<SecretSource, E> {
                Err(E::custom(NOT_A_TABLE))
            }
            fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<SecretSource, E> {
                Err(E::custom(NOT_A_TABLE))
            }
            fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<SecretSource, E> {
                Err(E::custom(NOT_A_TABLE))
            }
            fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<SecretSource, E> {
                Err(E::custom(NOT_A_TABLE))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<SecretSource, E> {
                Err(E::custom(NOT_A_TABLE))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, _: A) -> Result<SecretSource, A::Error> {
                Err(serde::de::Error::custom(NOT_A_TABLE))
            }
        }
        d.deserialize_any(Table)
    }
}

impl SecretSource {
    /// Reads the secret.
    pub fn read(&self, field: &'static str) -> Result<Secret, KafkaConfigError> {
        let unreadable = |source_name: String, reason: String| KafkaConfigError::SecretUnreadable {
            field,
            source_name,
            reason,
        };
        let value = match (&self.file, &self.env) {
            (Some(path), None) => std::fs::read_to_string(path)
                .map_err(|e| unreadable(format!("file {}", path.display()), e.to_string()))?
                .trim_end_matches(['\n', '\r'])
                .to_owned(),
            (None, Some(name)) => std::env::var(name)
                .map_err(|e| unreadable(format!("environment variable {name}"), e.to_string()))?,
            _ => {
                return Err(KafkaConfigError::Invalid {
                    field,
                    reason: "name exactly one of `file` or `env`".into(),
                });
            }
        };
        if value.is_empty() {
            let source_name = match (&self.file, &self.env) {
                (Some(path), _) => format!("file {}", path.display()),
                (_, Some(name)) => format!("environment variable {name}"),
                _ => unreachable!("checked above"),
            };
            return Err(unreadable(source_name, "it is empty".into()));
        }
        Ok(Secret(value))
    }
}

/// A secret read for a client: shown as `[redacted]` by `Debug` and `Display`.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// The value, for the one place that hands it to librdkafka.
    fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// TLS to the brokers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TlsConfig {
    /// PEM file of the CA(s) that signed the brokers' certificates; without it, the
    /// system's trust store.
    pub ca_file: Option<PathBuf>,
    /// PEM file of this client's certificate (mutual TLS).
    pub certificate_file: Option<PathBuf>,
    /// PEM file of this client's private key (mutual TLS).
    pub key_file: Option<PathBuf>,
    /// The private key's password, when it is encrypted.
    pub key_password: Option<SecretSource>,
    /// Check that a broker's certificate names the host connected to (librdkafka's
    /// `ssl.endpoint.identification.algorithm=https`). Leave it on outside tests.
    pub verify_hostname: bool,
}

impl Default for TlsConfig {
    fn default() -> Self {
        Self {
            ca_file: None,
            certificate_file: None,
            key_file: None,
            key_password: None,
            verify_hostname: true,
        }
    }
}

/// A SASL mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum SaslMechanism {
    /// `PLAIN`: the password itself is sent (use with TLS only).
    #[serde(rename = "PLAIN")]
    Plain,
    /// `SCRAM-SHA-256`.
    #[serde(rename = "SCRAM-SHA-256")]
    ScramSha256,
    /// `SCRAM-SHA-512`.
    #[serde(rename = "SCRAM-SHA-512")]
    ScramSha512,
}

impl SaslMechanism {
    fn name(self) -> &'static str {
        match self {
            Self::Plain => "PLAIN",
            Self::ScramSha256 => "SCRAM-SHA-256",
            Self::ScramSha512 => "SCRAM-SHA-512",
        }
    }
}

/// SASL authentication: one principal per component (docs/SECURITY.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaslConfig {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name (not a secret: it names the principal ACLs are granted to).
    pub username: String,
    /// Where the password is read from.
    pub password: SecretSource,
}

/// The `[kafka]` section.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// How clients reach the brokers.
    pub security_protocol: SecurityProtocol,
    /// TLS settings, read when `security_protocol` is `ssl` or `sasl_ssl`.
    pub tls: Option<TlsConfig>,
    /// SASL settings, required when `security_protocol` is `sasl_plaintext` or `sasl_ssl`.
    pub sasl: Option<SaslConfig>,
    /// Any other librdkafka property, passed through as given (checked by librdkafka when
    /// the first client is built; reserved and secret properties are refused by name).
    pub properties: BTreeMap<String, String>,
}

/// The typed fields of [`KafkaConfig`] and the librdkafka property each sets.
const TYPED: &[(&str, &str)] = &[
    ("security.protocol", "security_protocol"),
    ("ssl.ca.location", "tls.ca_file"),
    ("ssl.certificate.location", "tls.certificate_file"),
    ("ssl.key.location", "tls.key_file"),
    ("ssl.endpoint.identification.algorithm", "tls.verify_hostname"),
    ("sasl.mechanism", "sasl.mechanism"),
    ("sasl.mechanisms", "sasl.mechanism"),
    ("sasl.username", "sasl.username"),
];

impl KafkaConfig {
    /// The librdkafka properties of this section, secrets read, for `bootstrap`; what every
    /// client kubefacts builds starts from. Checks everything librdkafka can check
    /// without a broker: an unknown property or a bad value fails here, naming the key.
    pub fn client_config(&self, bootstrap: &str) -> Result<rdkafka::ClientConfig, KafkaConfigError> {
        self.check()?;
        self.check_complete()?;
        let mut c = rdkafka::ClientConfig::new();
        c.set("bootstrap.servers", bootstrap);
        let protocol = self.security_protocol;
        c.set("security.protocol", protocol.name());
        if protocol.tls() {
            let tls = self.tls.clone().unwrap_or_default();
            let path = |p: &PathBuf| p.display().to_string();
            if let Some(ca) = &tls.ca_file {
                c.set("ssl.ca.location", path(ca));
            }
            if let Some(cert) = &tls.certificate_file {
                c.set("ssl.certificate.location", path(cert));
            }
            if let Some(key) = &tls.key_file {
                c.set("ssl.key.location", path(key));
            }
            if let Some(password) = &tls.key_password {
                c.set("ssl.key.password", password.read("tls.key_password")?.expose());
            }
            c.set(
                "ssl.endpoint.identification.algorithm",
                if tls.verify_hostname { "https" } else { "none" },
            );
        }
        if let Some(sasl) = self.sasl.as_ref().filter(|_| protocol.sasl()) {
            c.set("sasl.mechanism", sasl.mechanism.name());
            c.set("sasl.username", &sasl.username);
            c.set("sasl.password", sasl.password.read("sasl.password")?.expose());
        }
        for (key, value) in &self.properties {
            c.set(key, value);
        }
        // librdkafka's own check of every property; its error carries the value, which is
        // dropped here (a value could be a secret).
        c.create_native_config().map_err(|e| match e {
            rdkafka::error::KafkaError::ClientConfig(_, reason, key, _) => {
                KafkaConfigError::Refused { key, reason }
            }
            other => KafkaConfigError::Refused { key: "(unknown)".into(), reason: other.to_string() },
        })?;
        Ok(c)
    }

    /// What can be checked without reading a secret: the pass-through's keys, and that
    /// the protocol has what it needs.
    /// What only the settings a client finally uses must have: SASL credentials when the
    /// protocol is SASL. A shared pipeline file may leave them to each component's flags
    /// or environment (`--kafka-sasl-username`, `KUBEFACTS_KAFKA_SASL_PASSWORD_FILE`), so
    /// [`KafkaConfig::check`] does not ask for them.
    pub fn check_complete(&self) -> Result<(), KafkaConfigError> {
        let protocol = self.security_protocol;
        let missing = |what: &str| KafkaConfigError::Invalid {
            field: "sasl",
            reason: format!(
                "security_protocol = \"{}\" needs {what}: [kafka.sasl] in the pipeline file, or \
                 --kafka-sasl-username and --kafka-sasl-password-file (KUBEFACTS_KAFKA_SASL_*)",
                protocol.name()
            ),
        };
        match &self.sasl {
            None if protocol.sasl() => Err(missing("SASL credentials")),
            Some(sasl) if protocol.sasl() && sasl.username.is_empty() => Err(missing("a SASL user name")),
            Some(sasl) if protocol.sasl() && sasl.password.file.is_none() && sasl.password.env.is_none() => {
                Err(missing("a SASL password file or variable"))
            }
            _ => Ok(()),
        }
    }

    /// Checks what the pipeline file alone must get right (everything but
    /// [`KafkaConfig::check_complete`]).
    pub fn check(&self) -> Result<(), KafkaConfigError> {
        for key in self.properties.keys() {
            if let Some(why) = reserved(key) {
                return Err(KafkaConfigError::Reserved { key: key.clone(), why });
            }
            if SECRET_PROPERTIES.contains(&key.as_str()) {
                return Err(KafkaConfigError::SecretInline { key: key.clone() });
            }
            if let Some((_, field)) = TYPED.iter().find(|(property, _)| property == key) {
                return Err(KafkaConfigError::Conflict { key: key.clone(), field });
            }
            if key.starts_with("ssl.") && !self.security_protocol.tls() {
                return Err(KafkaConfigError::Invalid {
                    field: "security_protocol",
                    reason: format!("[kafka.properties] sets {key}, but the protocol is not ssl or sasl_ssl"),
                });
            }
        }
        let protocol = self.security_protocol;
        if !protocol.sasl() && self.sasl.is_some() {
            return Err(KafkaConfigError::Invalid {
                field: "sasl",
                reason: format!(
                    "[kafka.sasl] is set but security_protocol = \"{}\" does not use it",
                    protocol.name()
                ),
            });
        }
        if !protocol.tls() && self.tls.is_some() {
            return Err(KafkaConfigError::Invalid {
                field: "tls",
                reason: format!(
                    "[kafka.tls] is set but security_protocol = \"{}\" does not use it",
                    protocol.name()
                ),
            });
        }
        if let Some(tls) = &self.tls
            && tls.certificate_file.is_some() != tls.key_file.is_some()
        {
            return Err(KafkaConfigError::Invalid {
                field: "tls",
                reason: "certificate_file and key_file go together (mutual TLS needs both)".into(),
            });
        }
        Ok(())
    }
}

impl KafkaConfig {
    /// The brokers at `bootstrap`, reached as this section says: secrets are read and
    /// every property is checked here, so a bad section fails at start, naming the key.
    pub fn brokers(&self, bootstrap: &str) -> Result<Brokers, KafkaConfigError> {
        let base = self.client_config(bootstrap)?;
        let protocol = self.security_protocol;
        let principal = match (&self.sasl, &self.tls) {
            (Some(sasl), _) if protocol.sasl() => format!("User:{}", sasl.username),
            (_, Some(tls)) if protocol.tls() && tls.certificate_file.is_some() => {
                "the principal of the TLS client certificate".into()
            }
            _ => "User:ANONYMOUS".into(),
        };
        Ok(Brokers::new(bootstrap, protocol.name(), principal, base))
    }
}

/// Whether byte `at` of a pipeline file lies in its `[kafka…]` tables (after a
/// `[kafka]` or `[kafka.<sub>]` header, before the next header).
pub(super) fn in_kafka_section(text: &str, at: usize) -> bool {
    let before = text.get(..at).unwrap_or(text);
    let header = before.lines().map(str::trim_start).rfind(|l| l.starts_with('['));
    header.is_some_and(|h| h.starts_with("[kafka]") || h.starts_with("[kafka."))
}

/// What kubefacts uses a reserved property for.
fn reserved(key: &str) -> Option<&'static str> {
    RESERVED_PROPERTIES.contains(&key).then_some(match key {
        "bootstrap.servers" => "--bootstrap / KUBEFACTS_BOOTSTRAP",
        "transactional.id" | "enable.idempotence" | "acks" | "isolation.level" => "exactly-once delivery",
        _ => "consumer groups and committed offsets",
    })
}

#[cfg(test)]
mod tests;
