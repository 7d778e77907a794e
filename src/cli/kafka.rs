//! Flags and environment variables for the `[kafka]` section, shared by every verb that
//! talks to Kafka. Each one overrides the same setting of the pipeline file, so a
//! Deployment can keep one pipeline file and set credentials per component. Passwords are
//! never flag values: a flag names the file or the variable that holds one.

use std::path::PathBuf;

use kubefacts::config::kafka::{KafkaConfig, SaslConfig, SaslMechanism, SecretSource, SecurityProtocol};

/// `[kafka]` settings from the command line or the environment (`KUBEFACTS_KAFKA_*`).
#[derive(Debug, Default, clap::Args)]
pub struct KafkaSecurityArgs {
    /// How clients reach the brokers: plaintext, ssl, sasl_plaintext or sasl_ssl
    /// (overrides [kafka] security_protocol).
    #[arg(long, env = "KUBEFACTS_KAFKA_SECURITY_PROTOCOL", value_parser = from_toml_name::<SecurityProtocol>)]
    pub kafka_security_protocol: Option<SecurityProtocol>,
    /// PEM file of the CA that signed the brokers' certificates ([kafka.tls] ca_file).
    #[arg(long, env = "KUBEFACTS_KAFKA_CA_FILE")]
    pub kafka_ca_file: Option<PathBuf>,
    /// PEM file of this client's certificate ([kafka.tls] certificate_file).
    #[arg(long, env = "KUBEFACTS_KAFKA_CERTIFICATE_FILE")]
    pub kafka_certificate_file: Option<PathBuf>,
    /// PEM file of this client's private key ([kafka.tls] key_file).
    #[arg(long, env = "KUBEFACTS_KAFKA_KEY_FILE")]
    pub kafka_key_file: Option<PathBuf>,
    /// SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 ([kafka.sasl] mechanism).
    #[arg(long, env = "KUBEFACTS_KAFKA_SASL_MECHANISM", value_parser = from_toml_name::<SaslMechanism>)]
    pub kafka_sasl_mechanism: Option<SaslMechanism>,
    /// SASL user name: the principal ACLs are granted to ([kafka.sasl] username).
    #[arg(long, env = "KUBEFACTS_KAFKA_SASL_USERNAME")]
    pub kafka_sasl_username: Option<String>,
    /// File holding the SASL password, as a mounted Secret ([kafka.sasl] password.file).
    #[arg(long, env = "KUBEFACTS_KAFKA_SASL_PASSWORD_FILE", conflicts_with = "kafka_sasl_password_env")]
    pub kafka_sasl_password_file: Option<PathBuf>,
    /// Name of the environment variable holding the SASL password ([kafka.sasl] password.env).
    #[arg(long, env = "KUBEFACTS_KAFKA_SASL_PASSWORD_ENV")]
    pub kafka_sasl_password_env: Option<String>,
}

/// A value of a `[kafka]` enum as the pipeline file spells it.
fn from_toml_name<T: serde::de::DeserializeOwned>(s: &str) -> Result<T, String> {
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(s))
        .map_err(|e| e.to_string())
}

impl KafkaSecurityArgs {
    /// `base` (the pipeline file's section) with every given flag applied over it.
    pub fn apply(&self, base: &KafkaConfig) -> KafkaConfig {
        let mut k = base.clone();
        if let Some(p) = self.kafka_security_protocol {
            k.security_protocol = p;
        }
        if self.kafka_ca_file.is_some()
            || self.kafka_certificate_file.is_some()
            || self.kafka_key_file.is_some()
        {
            let tls = k.tls.get_or_insert_with(Default::default);
            if let Some(f) = &self.kafka_ca_file {
                tls.ca_file = Some(f.clone());
            }
            if let Some(f) = &self.kafka_certificate_file {
                tls.certificate_file = Some(f.clone());
            }
            if let Some(f) = &self.kafka_key_file {
                tls.key_file = Some(f.clone());
            }
        }
        let password = match (&self.kafka_sasl_password_file, &self.kafka_sasl_password_env) {
            (Some(f), _) => Some(SecretSource { file: Some(f.clone()), env: None }),
            (None, Some(v)) => Some(SecretSource { file: None, env: Some(v.clone()) }),
            (None, None) => None,
        };
        if self.kafka_sasl_mechanism.is_some() || self.kafka_sasl_username.is_some() || password.is_some() {
            let sasl = k.sasl.get_or_insert_with(|| SaslConfig {
                mechanism: SaslMechanism::ScramSha512,
                username: String::new(),
                password: SecretSource::default(),
            });
            if let Some(m) = self.kafka_sasl_mechanism {
                sasl.mechanism = m;
            }
            if let Some(u) = &self.kafka_sasl_username {
                sasl.username.clone_from(u);
            }
            if let Some(p) = password {
                sasl.password = p;
            }
        }
        k
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        kafka: KafkaSecurityArgs,
    }

    #[test]
    fn flags_override_the_section_and_fill_what_it_lacks() {
        let cli = Cli::parse_from([
            "x",
            "--kafka-security-protocol",
            "sasl_ssl",
            "--kafka-ca-file",
            "/ca.pem",
            "--kafka-sasl-mechanism",
            "SCRAM-SHA-256",
            "--kafka-sasl-username",
            "kubefacts-cleaner",
            "--kafka-sasl-password-file",
            "/secret/password",
        ]);
        let base = KafkaConfig {
            sasl: Some(SaslConfig {
                mechanism: SaslMechanism::Plain,
                username: "from-file".into(),
                password: SecretSource { file: None, env: Some("PW".into()) },
            }),
            ..KafkaConfig::default()
        };
        let k = cli.kafka.apply(&base);
        assert_eq!(k.security_protocol, SecurityProtocol::SaslSsl);
        assert_eq!(k.tls.as_ref().and_then(|t| t.ca_file.clone()), Some(PathBuf::from("/ca.pem")));
        let sasl = k.sasl.expect("sasl");
        assert_eq!(sasl.mechanism, SaslMechanism::ScramSha256);
        assert_eq!(sasl.username, "kubefacts-cleaner");
        assert_eq!(sasl.password, SecretSource { file: Some("/secret/password".into()), env: None });
    }

    #[test]
    fn no_flag_leaves_the_section_as_it_is() {
        let base = KafkaConfig { security_protocol: SecurityProtocol::Ssl, ..KafkaConfig::default() };
        assert_eq!(Cli::parse_from(["x"]).kafka.apply(&base), base);
    }

    #[test]
    fn a_password_is_never_a_flag_value() {
        assert!(Cli::try_parse_from(["x", "--kafka-sasl-password", "hunter2"]).is_err());
        let bad = Cli::try_parse_from(["x", "--kafka-security-protocol", "tls"]).err().expect("refused");
        assert!(bad.to_string().contains("tls"), "{bad}");
    }
}
