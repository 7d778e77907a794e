//! How every kubefacts client reaches the brokers ([`Brokers`], resolved once from the
//! pipeline's `[kafka]` section), and what it does when Kafka refuses it ([`Refused`]).
//! Below every pipeline stage: the runtime, the watcher, the cleaner and the alerts
//! forwarder all build their clients here.

mod refusal;

pub use refusal::{
    REAUTHENTICATION_GRACE, Reauthentication, Refused, Refusing, Watch, describe_refused, refusal_code,
};

/// The brokers and how to reach them, resolved once at start (secrets read): every client
/// kubefacts builds starts from [`Brokers::client`]. A rotated secret is read at the next
/// start. `Debug` shows the bootstrap servers and the protocol, nothing else.
#[derive(Clone)]
pub struct Brokers {
    bootstrap: String,
    /// librdkafka's `security.protocol`.
    protocol: &'static str,
    /// Who the brokers see, for refusals: `User:<sasl username>`, or what TLS or no
    /// authentication makes of the client.
    principal: String,
    base: rdkafka::ClientConfig,
}

impl Brokers {
    /// Plaintext brokers at `bootstrap` (the default section).
    pub fn plaintext(bootstrap: &str) -> Self {
        let mut base = rdkafka::ClientConfig::new();
        base.set("bootstrap.servers", bootstrap);
        Self::new(bootstrap, "plaintext", "User:ANONYMOUS".into(), base)
    }

    /// Brokers at `bootstrap` reached with `base` (which holds `bootstrap.servers` and
    /// every security property), as `principal`; built by the `[kafka]` section.
    pub fn new(
        bootstrap: &str,
        protocol: &'static str,
        principal: String,
        base: rdkafka::ClientConfig,
    ) -> Self {
        Self { bootstrap: bootstrap.to_owned(), protocol, principal, base }
    }

    /// The bootstrap servers, for messages.
    pub fn bootstrap(&self) -> &str {
        &self.bootstrap
    }

    /// Who the brokers see this client as (`User:<name>`), for messages.
    pub fn principal(&self) -> String {
        self.principal.clone()
    }

    /// A client configuration to add this client's own properties to.
    pub fn client(&self) -> rdkafka::ClientConfig {
        self.base.clone()
    }
}

impl std::fmt::Debug for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Brokers")
            .field("bootstrap", &self.bootstrap)
            .field("security_protocol", &self.protocol)
            .field("principal", &self.principal)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.bootstrap)
    }
}
