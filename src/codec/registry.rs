//! A small client for the Confluent schema-registry REST API (v7), which Confluent's own
//! registry, Apicurio's `/apis/ccompat/v7` and Karapace all serve.

use std::{fmt, time::Duration};

use reqwest::{StatusCode, Url};
use serde::{Deserialize, Serialize};
use thiserror::Error;

const CONTENT_TYPE: &str = "application/vnd.schemaregistry.v1+json";

/// Why a registry call failed.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// The configured URL is not a valid absolute http(s) URL.
    #[error("invalid schema registry URL: {reason}")]
    InvalidUrl {
        /// What is wrong with it.
        reason: String,
    },
    /// The registry could not be reached or did not answer in time.
    #[error("schema registry {url} unreachable: {source}")]
    Unreachable {
        /// The registry (credentials removed).
        url: String,
        /// The transport error.
        #[source]
        source: reqwest::Error,
    },
    /// The TLS handshake with the registry failed: its certificate is not trusted (no
    /// `--registry-ca-file`, or the wrong one) or it speaks no TLS we accept. At start a verb
    /// stops on it ([`RegistryError::is_refusal`]): waiting does not change a configuration.
    /// During a run, with a registry trusted at start, it is retried like an unreachable
    /// one (a certificate being rotated), never a reason to dead-letter a record.
    #[error("schema registry {url} refused by TLS: {source}")]
    Tls {
        /// The registry (credentials removed).
        url: String,
        /// The transport error, with rustls' reason among its sources.
        #[source]
        source: reqwest::Error,
    },
    /// The registry answered with an unexpected status.
    #[error("schema registry {url} answered {status} to {operation}: {body}")]
    Status {
        /// The registry (credentials removed).
        url: String,
        /// What was asked.
        operation: &'static str,
        /// HTTP status.
        status: StatusCode,
        /// Response body, cut to 500 bytes.
        body: String,
    },
    /// The registry refused a schema as incompatible with the subject's earlier versions.
    #[error("schema registry refused the schema for subject {subject} as incompatible: {body}")]
    Incompatible {
        /// The subject.
        subject: String,
        /// The registry's explanation.
        body: String,
    },
    /// The registry's answer was not the JSON the API promises.
    #[error("schema registry {url} sent an unreadable answer to {operation}: {source}")]
    BadResponse {
        /// The registry (credentials removed).
        url: String,
        /// What was asked.
        operation: &'static str,
        /// The decoding error.
        #[source]
        source: reqwest::Error,
    },
}

impl RegistryError {
    /// Whether the same call may succeed later.
    pub fn is_retriable(&self) -> bool {
        match self {
            Self::Unreachable { .. } | Self::Tls { .. } => true,
            Self::Status { status, .. } => status.is_server_error(),
            _ => false,
        }
    }

    /// Whether the registry (or the way to it) refused this process as configured: an
    /// untrusted certificate. Retriable during a run, a reason to stop at start.
    pub fn is_refusal(&self) -> bool {
        matches!(self, Self::Tls { .. })
    }
}

/// Compatibility levels of the Confluent API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Compatibility {
    /// New schemas can read data written by the latest one.
    Backward,
    /// New schemas can read data written by every earlier one.
    BackwardTransitive,
    /// Backward and forward against the latest.
    Full,
    /// Backward and forward against every earlier one.
    FullTransitive,
    /// The latest schema can read data written by the new one.
    Forward,
    /// Every earlier schema can read data written by the new one.
    ForwardTransitive,
    /// No check.
    None,
    /// A level this client does not know (read only).
    #[serde(other)]
    Other,
}

/// A Confluent-API schema registry client. `Debug` and errors never show credentials.
#[derive(Clone)]
pub struct RegistryClient {
    base: Url,
    http: reqwest::Client,
    /// Basic auth given apart from the URL ([`RegistryAccess::basic_auth`]).
    auth: Option<(String, String)>,
}

impl fmt::Debug for RegistryClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryClient").field("base", &redacted(&self.base)).finish()
    }
}

#[derive(Serialize)]
struct SchemaBody<'a> {
    schema: &'a str,
}
#[derive(Deserialize)]
struct IdBody {
    id: u32,
}
#[derive(Deserialize)]
struct SchemaText {
    schema: String,
}
#[derive(Deserialize)]
struct IsCompatible {
    is_compatible: bool,
}

/// How the client reaches a registry beyond its URL: the CA that signed an `https`
/// registry's certificate, and basic-auth credentials read from a file or the environment
/// (not in the URL, which shows in process lists and Pod specs).
#[derive(Clone, Default)]
pub struct RegistryAccess {
    /// PEM of the CA(s) an `https` registry's certificate chains to, added to the
    /// system's trust store.
    pub ca_pem: Option<Vec<u8>>,
    /// Basic auth: user name and password. Wins over user info in the URL.
    pub basic_auth: Option<(String, String)>,
}

impl fmt::Debug for RegistryAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RegistryAccess")
            .field("ca_pem", &self.ca_pem.as_ref().map(|p| format!("{} bytes", p.len())))
            .field("basic_auth", &self.basic_auth.as_ref().map(|(user, _)| format!("{user}:[redacted]")))
            .finish()
    }
}

impl RegistryClient {
    /// A client for the registry at `url` (e.g. `http://127.0.0.1:8081` or
    /// `http://host/apis/ccompat/v7`); credentials in the URL are sent as basic auth.
    pub fn new(url: &str, timeout: Duration) -> Result<Self, RegistryError> {
        Self::with_access(url, timeout, RegistryAccess::default())
    }

    /// [`RegistryClient::new`], trusting `access.ca_pem` too and sending `access.basic_auth`.
    pub fn with_access(url: &str, timeout: Duration, access: RegistryAccess) -> Result<Self, RegistryError> {
        let mut base = Url::parse(url).map_err(|e| RegistryError::InvalidUrl { reason: e.to_string() })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(RegistryError::InvalidUrl {
                reason: format!("scheme {:?} is not http or https", base.scheme()),
            });
        }
        if !base.path().ends_with('/') {
            let path = format!("{}/", base.path());
            base.set_path(&path);
        }
        let mut builder = crate::http::client_builder().timeout(timeout);
        if let Some(pem) = &access.ca_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                RegistryError::InvalidUrl { reason: format!("the registry CA file is not PEM: {e}") }
            })?;
            if certs.is_empty() {
                return Err(RegistryError::InvalidUrl {
                    reason: "the registry CA file holds no certificate".into(),
                });
            }
            builder = builder.tls_certs_merge(certs);
        }
        let http =
            builder.build().map_err(|e| RegistryError::Unreachable { url: redacted(&base), source: e })?;
        Ok(Self { base, http, auth: access.basic_auth })
    }

    /// The registry URL without credentials, for logs.
    pub fn url(&self) -> String {
        redacted(&self.base)
    }

    /// The TopicNameStrategy subject of a topic's record values.
    pub fn value_subject(topic: &str) -> String {
        format!("{topic}-value")
    }

    /// The TopicNameStrategy subject of a topic's record keys.
    pub fn key_subject(topic: &str) -> String {
        format!("{topic}-key")
    }

    /// Registers `schema` under `subject` (or finds it there) and returns its id.
    pub async fn register(&self, subject: &str, schema: &str) -> Result<u32, RegistryError> {
        let op = "register";
        let req = self.request(reqwest::Method::POST, &["subjects", subject, "versions"]);
        let resp = self.send(req.json(&SchemaBody { schema })).await?;
        match resp.status() {
            s if s.is_success() => Ok(self.json::<IdBody>(resp, op).await?.id),
            StatusCode::CONFLICT => {
                Err(RegistryError::Incompatible { subject: subject.to_owned(), body: body_text(resp).await })
            }
            _ => Err(self.status_error(resp, op).await),
        }
    }

    /// The schema text with this id, or `None` if the registry does not know it.
    pub async fn schema_by_id(&self, id: u32) -> Result<Option<String>, RegistryError> {
        let op = "get schema by id";
        let req = self.request(reqwest::Method::GET, &["schemas", "ids", &id.to_string()]);
        let resp = self.send(req).await?;
        match resp.status() {
            s if s.is_success() => Ok(Some(self.json::<SchemaText>(resp, op).await?.schema)),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.status_error(resp, op).await),
        }
    }

    /// Sets the compatibility level the registry enforces for a subject.
    pub async fn set_compatibility(&self, subject: &str, level: Compatibility) -> Result<(), RegistryError> {
        #[derive(Serialize)]
        struct Body {
            compatibility: Compatibility,
        }
        let op = "set compatibility";
        let req = self.request(reqwest::Method::PUT, &["config", subject]);
        let resp = self.send(req.json(&Body { compatibility: level })).await?;
        if resp.status().is_success() { Ok(()) } else { Err(self.status_error(resp, op).await) }
    }

    /// The compatibility level set for a subject, `None` when it has none of its own
    /// (Confluent answers 404; Apicurio `NONE` for a subject without a rule).
    pub async fn compatibility(&self, subject: &str) -> Result<Option<Compatibility>, RegistryError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Level {
            compatibility_level: Option<Compatibility>,
            compatibility: Option<Compatibility>,
        }
        let op = "get compatibility";
        let resp = self.send(self.request(reqwest::Method::GET, &["config", subject])).await?;
        match resp.status() {
            s if s.is_success() => {
                let level = self.json::<Level>(resp, op).await?;
                Ok(level.compatibility_level.or(level.compatibility).filter(|l| *l != Compatibility::None))
            }
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(self.status_error(resp, op).await),
        }
    }

    /// Sets `level` on a subject that has no level of its own; one an operator set (any
    /// but `NONE`) is left as it is.
    pub async fn ensure_compatibility(
        &self,
        subject: &str,
        level: Compatibility,
    ) -> Result<(), RegistryError> {
        if self.compatibility(subject).await?.is_some() {
            return Ok(());
        }
        match self.set_compatibility(subject, level).await {
            // Another writer of the subject set it meanwhile (Apicurio refuses a second rule
            // with 409): what counts is that it has a level now.
            Err(RegistryError::Status { status: StatusCode::CONFLICT, .. })
                if self.compatibility(subject).await?.is_some() =>
            {
                Ok(())
            }
            other => other,
        }
    }

    /// Asks whether `schema` is compatible with the subject's versions under its level.
    pub async fn is_compatible(&self, subject: &str, schema: &str) -> Result<bool, RegistryError> {
        let op = "check compatibility";
        let path = ["compatibility", "subjects", subject, "versions", "latest"];
        let resp = self.send(self.request(reqwest::Method::POST, &path).json(&SchemaBody { schema })).await?;
        if resp.status().is_success() {
            Ok(self.json::<IsCompatible>(resp, op).await?.is_compatible)
        } else {
            Err(self.status_error(resp, op).await)
        }
    }

    fn request(&self, method: reqwest::Method, segments: &[&str]) -> reqwest::RequestBuilder {
        let mut url = self.base.clone();
        url.set_username("").ok();
        url.set_password(None).ok();
        url.path_segments_mut().expect("http URL has a path").pop_if_empty().extend(segments);
        let mut req = self.http.request(method, url).header(reqwest::header::ACCEPT, CONTENT_TYPE);
        if let Some((user, password)) = &self.auth {
            req = req.basic_auth(user, Some(password));
        } else if !self.base.username().is_empty() {
            req = req.basic_auth(self.base.username(), self.base.password());
        }
        req
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> Result<reqwest::Response, RegistryError> {
        req.header(reqwest::header::CONTENT_TYPE, CONTENT_TYPE).send().await.map_err(|e| {
            let (url, source) = (self.url(), e.without_url());
            if refused_by_tls(&source) {
                RegistryError::Tls { url, source }
            } else {
                RegistryError::Unreachable { url, source }
            }
        })
    }

    async fn json<T: serde::de::DeserializeOwned>(
        &self,
        resp: reqwest::Response,
        operation: &'static str,
    ) -> Result<T, RegistryError> {
        resp.json::<T>().await.map_err(|e| RegistryError::BadResponse {
            url: self.url(),
            operation,
            source: e.without_url(),
        })
    }

    async fn status_error(&self, resp: reqwest::Response, operation: &'static str) -> RegistryError {
        let status = resp.status();
        RegistryError::Status { url: self.url(), operation, status, body: body_text(resp).await }
    }
}

async fn body_text(resp: reqwest::Response) -> String {
    let mut body = resp.text().await.unwrap_or_default();
    if body.len() > 500 {
        let cut = (0..=500).rev().find(|i| body.is_char_boundary(*i)).unwrap_or(0);
        body.truncate(cut);
        body.push('…');
    }
    body
}

/// Whether rustls refused the connection (a certificate or handshake error), as opposed to
/// the network failing it. `io::Error::source` skips the error it wraps, and the connector
/// nests one I/O error in another (`Other` around `InvalidData` around rustls' error), so
/// every I/O error met is opened down to what it wraps.
fn refused_by_tls(e: &reqwest::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = next {
        let mut inner = Some(err);
        while let Some(i) = inner {
            if i.is::<rustls::Error>() {
                return true;
            }
            inner = i.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()).map(|w| w as _);
        }
        next = err.source();
    }
    false
}

/// The URL with any user name and password removed.
fn redacted(url: &Url) -> String {
    let mut u = url.clone();
    if !u.username().is_empty() || u.password().is_some() {
        u.set_username("").ok();
        u.set_password(None).ok();
    }
    u.to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn access_debug_shows_no_password() {
        let access = RegistryAccess {
            ca_pem: Some(b"pem".to_vec()),
            basic_auth: Some(("u".into(), "hunter2".into())),
        };
        let c = RegistryClient::with_access(
            "https://r.example/",
            Duration::from_secs(1),
            RegistryAccess { ca_pem: None, basic_auth: access.basic_auth.clone() },
        )
        .unwrap();
        for shown in [format!("{access:?}"), format!("{c:?}"), c.url()] {
            assert!(!shown.contains("hunter2"), "{shown}");
        }
        assert!(format!("{access:?}").contains("u:[redacted]"));
        let not_pem = RegistryAccess { ca_pem: Some(b"not a certificate".to_vec()), basic_auth: None };
        let e =
            RegistryClient::with_access("https://r.example/", Duration::from_secs(1), not_pem).unwrap_err();
        assert!(e.to_string().contains("CA file"), "{e}");
    }

    use super::*;

    #[test]
    fn credentials_never_show_in_debug_or_url() {
        let c = RegistryClient::new(
            "https://svc:s3cr3t@registry.example/apis/ccompat/v7",
            Duration::from_secs(1),
        )
        .unwrap();
        let shown = format!("{c:?} {}", c.url());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(!shown.contains("svc"), "{shown}");
        assert!(shown.contains("registry.example/apis/ccompat/v7/"), "{shown}");
    }

    #[test]
    fn rejects_non_http_urls() {
        assert!(matches!(
            RegistryClient::new("file:///etc/passwd", Duration::from_secs(1)),
            Err(RegistryError::InvalidUrl { .. })
        ));
        assert!(matches!(
            RegistryClient::new("not a url", Duration::from_secs(1)),
            Err(RegistryError::InvalidUrl { .. })
        ));
    }
}
