use super::*;

const PASSWORD: &str = "s3cret-never-shown";

fn sasl_ssl(password: SecretSource) -> KafkaConfig {
    KafkaConfig {
        security_protocol: SecurityProtocol::SaslSsl,
        tls: Some(TlsConfig { ca_file: Some("/etc/kafka/ca.crt".into()), ..TlsConfig::default() }),
        sasl: Some(SaslConfig {
            mechanism: SaslMechanism::ScramSha512,
            username: "kubefacts-watch".into(),
            password,
        }),
        properties: BTreeMap::new(),
    }
}

fn password_file(dir: &tempfile::TempDir) -> SecretSource {
    let path = dir.path().join("password");
    std::fs::write(&path, format!("{PASSWORD}\n")).unwrap();
    SecretSource { file: Some(path), env: None }
}

#[test]
fn the_default_is_plaintext_with_nothing_else() {
    let c = KafkaConfig::default().client_config("127.0.0.1:9092").unwrap();
    assert_eq!(c.get("bootstrap.servers"), Some("127.0.0.1:9092"));
    assert_eq!(c.get("security.protocol"), Some("plaintext"));
    assert_eq!(c.get("ssl.ca.location"), None);
    assert_eq!(c.get("sasl.username"), None);
}

#[test]
fn sasl_ssl_reads_the_password_from_its_file_and_never_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = sasl_ssl(password_file(&dir));
    let c = cfg.client_config("broker:9093").unwrap();
    assert_eq!(c.get("security.protocol"), Some("sasl_ssl"));
    assert_eq!(c.get("sasl.mechanism"), Some("SCRAM-SHA-512"));
    assert_eq!(c.get("sasl.username"), Some("kubefacts-watch"));
    assert_eq!(c.get("sasl.password"), Some(PASSWORD), "the trailing newline of a mounted file is dropped");
    assert_eq!(c.get("ssl.ca.location"), Some("/etc/kafka/ca.crt"));
    assert_eq!(
        c.get("ssl.endpoint.identification.algorithm"),
        Some("https"),
        "hostnames are verified by default"
    );
    for shown in [format!("{cfg:?}"), format!("{c:?}"), toml::to_string(&cfg).unwrap()] {
        assert!(!shown.contains(PASSWORD), "{shown}");
    }
    let secret = cfg.sasl.as_ref().unwrap().password.read("sasl.password").unwrap();
    assert_eq!(format!("{secret:?} {secret}"), "[redacted] [redacted]");
}

#[test]
fn a_password_may_come_from_the_environment() {
    // A variable every test process has (setting one would need `unsafe`).
    let name = "PATH";
    let value = std::env::var(name).expect("PATH is set");
    let c = sasl_ssl(SecretSource { file: None, env: Some(name.into()) }).client_config("b:9093").unwrap();
    assert_eq!(c.get("sasl.password"), Some(value.as_str()));
    let missing = sasl_ssl(SecretSource { file: None, env: Some("KUBEFACTS_TEST_UNSET_VARIABLE".into()) });
    let e = missing.client_config("b:9093").unwrap_err().to_string();
    assert!(e.contains("sasl.password") && e.contains("KUBEFACTS_TEST_UNSET_VARIABLE"), "{e}");
}

#[test]
fn a_secret_names_exactly_one_source_and_is_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let both = SecretSource { file: Some(dir.path().join("p")), env: Some("X".into()) };
    let neither = SecretSource::default();
    for source in [both, neither] {
        let e = source.read("sasl.password").unwrap_err().to_string();
        assert!(e.contains("exactly one of `file` or `env`"), "{e}");
    }
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    let e = SecretSource { file: Some(empty), env: None }.read("sasl.password").unwrap_err().to_string();
    assert!(e.contains("it is empty"), "{e}");
}

#[test]
fn pass_through_properties_are_set_and_checked_by_name() {
    let mut cfg = KafkaConfig::default();
    cfg.properties.insert("socket.keepalive.enable".into(), "true".into());
    cfg.properties.insert("client.rack".into(), "eu-west-1a".into());
    let c = cfg.client_config("b:9092").unwrap();
    assert_eq!(c.get("socket.keepalive.enable"), Some("true"));
    assert_eq!(c.get("client.rack"), Some("eu-west-1a"));

    let refused = |key: &str, value: &str| {
        let mut cfg = KafkaConfig::default();
        cfg.properties.insert(key.into(), value.into());
        let e = cfg.client_config("b:9092").unwrap_err().to_string();
        assert!(e.contains(key), "{key}: {e}");
        assert!(!e.contains(value), "the value is never shown (it could be a secret): {e}");
        e
    };
    assert!(refused("sasl.pasword", "hunter2-typo").contains("librdkafka refuses it"));
    assert!(refused("socket.keepalive.enable", "maybe-not").contains("librdkafka refuses it"));
    assert!(refused("enable.idempotence", "false-x").contains("kubefacts sets this property itself"));
    assert!(refused("transactional.id", "mine-x").contains("exactly-once"));
    assert!(refused("group.id", "other-x").contains("consumer groups"));
    assert!(refused("sasl.password", "hunter2-inline").contains("never a value in the pipeline file"));
    assert!(refused("security.protocol", "ssl-x").contains("conflicts with [kafka] security_protocol"));
}

#[test]
fn the_protocol_and_its_sections_must_agree() {
    let dir = tempfile::tempdir().unwrap();
    let mut no_sasl = sasl_ssl(password_file(&dir));
    no_sasl.sasl = None;
    // A shared pipeline file may leave the credentials to each component's flags.
    assert!(no_sasl.check().is_ok());
    let incomplete = no_sasl.check_complete().unwrap_err().to_string();
    assert!(
        incomplete.contains("needs SASL credentials") && incomplete.contains("--kafka-sasl-username"),
        "{incomplete}"
    );
    assert!(no_sasl.client_config("127.0.0.1:9").is_err());
    let mut nameless = sasl_ssl(password_file(&dir));
    nameless.sasl.as_mut().unwrap().username.clear();
    assert!(nameless.check_complete().unwrap_err().to_string().contains("a SASL user name"));
    let mut plain_with_sasl = sasl_ssl(password_file(&dir));
    plain_with_sasl.security_protocol = SecurityProtocol::Plaintext;
    plain_with_sasl.tls = None;
    assert!(plain_with_sasl.check().unwrap_err().to_string().contains("does not use it"));
    let mut half_mtls = sasl_ssl(password_file(&dir));
    half_mtls.tls.as_mut().unwrap().certificate_file = Some("/c.pem".into());
    assert!(half_mtls.check().unwrap_err().to_string().contains("go together"));
    let mut tls_keys_on_plaintext = KafkaConfig::default();
    tls_keys_on_plaintext.properties.insert("ssl.cipher.suites".into(), "X".into());
    assert!(tls_keys_on_plaintext.check().unwrap_err().to_string().contains("not ssl or sasl_ssl"));
}

#[test]
fn the_section_reads_from_a_pipeline_file() {
    let text = r#"
[kafka]
security_protocol = "sasl_ssl"
[kafka.tls]
ca_file = "/etc/kafka/ca.crt"
verify_hostname = false
[kafka.sasl]
mechanism = "SCRAM-SHA-256"
username = "kubefacts-process"
password = { file = "/var/run/secrets/kafka/password" }
[kafka.properties]
"client.rack" = "eu-west-1a"
"#;
    let cfg = crate::config::PipelineConfig::parse(text, "test").unwrap();
    let kafka = &cfg.kafka;
    assert_eq!(kafka.security_protocol, SecurityProtocol::SaslSsl);
    assert!(!kafka.tls.as_ref().unwrap().verify_hostname);
    let sasl = kafka.sasl.as_ref().unwrap();
    assert_eq!((sasl.mechanism, sasl.username.as_str()), (SaslMechanism::ScramSha256, "kubefacts-process"));
    assert_eq!(sasl.password.file.as_deref(), Some(std::path::Path::new("/var/run/secrets/kafka/password")));

    // A password written inline is refused, and the error never echoes it: neither the
    // value nor the line it is on.
    let inline = "cluster = \"c\"\n[kafka]\nsecurity_protocol = \"sasl_ssl\"\n[kafka.sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"hunter2\"\n";
    let e = crate::config::PipelineConfig::parse(inline, "test").unwrap_err().to_string();
    assert!(e.contains("never a value in the pipeline file"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let elsewhere = "cluster = 5\n";
    let e = crate::config::PipelineConfig::parse(elsewhere, "test").unwrap_err().to_string();
    assert!(e.contains("cluster = 5"), "lines outside [kafka] are still shown: {e}");
    let reserved = "[kafka.properties]\n\"acks\" = \"1\"\n";
    let e = crate::config::PipelineConfig::parse(reserved, "test").unwrap_err().to_string();
    assert!(e.contains("kafka") && e.contains("acks"), "{e}");
}
