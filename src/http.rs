//! HTTP clients (schema registry, Alertmanager, OTLP export) and the TLS crypto provider
//! they and the Kubernetes client share.

use std::sync::Once;

/// Installs ring as the process-wide rustls crypto provider, once. reqwest is built
/// without a provider of its own, so every client must be built after this; kube's client
/// finds the same provider.
pub fn install_crypto_provider() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // Err: a provider is installed already (by the embedding application): keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// A reqwest client builder, after [`install_crypto_provider`].
pub fn client_builder() -> reqwest::ClientBuilder {
    install_crypto_provider();
    reqwest::Client::builder()
}

/// `reqwest::get` after [`install_crypto_provider`] (one-off requests: tests, probes).
pub async fn get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    install_crypto_provider();
    reqwest::get(url).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_build_with_the_installed_provider() {
        client_builder().build().expect("a client builds");
        assert!(rustls::crypto::CryptoProvider::get_default().is_some());
    }
}
