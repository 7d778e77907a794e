//! A verb's writer schemas, registered before it starts: a registry that does not answer
//! yet is waited for, said in the log and on `/readyz` (docs/RUNTIME.md, "A late
//! registry").

use std::future::Future;

use kubefacts::{
    codec::{Codec, WriterSchema},
    config::TopicsConfig,
    health::Health,
    observe::InputTopic,
};

/// How registering the writer schemas ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Registered {
    /// Every schema is registered; the verb's writers are built from the codec's ids.
    All,
    /// `stop` came first: the verb stops without having started.
    Stopped,
}

/// Registers `wanted` through `codec`, waiting out a registry that is unreachable, slow or
/// failing (5xx) for as long as it takes: one warning per attempt (the waits grow from
/// 100 ms to 5 s), naming the registry and the subject, and a `schema registry` condition
/// of `health` (`/readyz` 503) until it answers. A refusal (an incompatible schema,
/// refused credentials, an untrusted certificate) fails at once.
pub(super) async fn register_writers(
    codec: &Codec,
    wanted: &[WriterSchema],
    health: Option<&Health>,
    stop: impl Future<Output = ()>,
) -> anyhow::Result<Registered> {
    let ready = health.map(|h| h.condition("schema registry", "registering the writer schemas"));
    let registering = codec.register_writers(wanted, |w| {
        tracing::warn!(
            registry = %w.registry, subject = w.subject, attempt = w.attempt,
            retry_in_ms = w.retry_in.as_millis() as u64, error = %w.error,
            "the schema registry did not answer: waiting, then registering the schema again"
        );
        if let Some(ready) = &ready {
            ready.waiting(format!(
                "waiting for {} to register subject {} ({} attempts failed, the last: {})",
                w.registry, w.subject, w.attempt, w.error
            ));
        }
    });
    tokio::select! {
        done = registering => {
            let failed = done?;
            if failed > 0 {
                tracing::info!(
                    failed_attempts = failed,
                    "the schema registry answers again: every writer schema is registered"
                );
            }
            if let Some(ready) = &ready {
                ready.met();
            }
            Ok(Registered::All)
        }
        () = stop => {
            tracing::info!("stopping while waiting for the schema registry");
            Ok(Registered::Stopped)
        }
    }
}

/// Resolves at the first SIGTERM on `sigterm` or SIGINT.
pub(super) async fn stop_signal(sigterm: &mut tokio::signal::unix::Signal) {
    tokio::select! {
        _ = sigterm.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// The writers a publisher of the input topics `only` builds (`Publisher::connect_to`).
pub(super) fn input_writers(topics: &TopicsConfig, only: &[InputTopic]) -> Vec<WriterSchema> {
    only.iter().map(|t| WriterSchema::value(t.topic_name(topics), t.full_name())).collect()
}

/// [`register_writers`] for a publishing verb without `/readyz` of its own at that point
/// (`publish`, `session-event`): waits until the registry answers or SIGTERM/SIGINT.
pub(super) async fn register_inputs(
    codec: &Codec,
    topics: &TopicsConfig,
    only: &[InputTopic],
) -> anyhow::Result<Registered> {
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    register_writers(codec, &input_writers(topics, only), None, stop_signal(&mut sigterm)).await
}
