//! A consumer's integration test against a real kubefacts (docs/TESTING_DOWNSTREAM.md):
//! `cargo run --example consumer_test --features testcontainers` with Docker running.
use std::time::Duration;

use kubefacts::{journal::JobRun, testcontainers::KubefactsStack};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // Kafka and `kubefacts process` in Docker (add `.with_registry(true)` for Confluent framing).
    let stack = KubefactsStack::builder().start().await?;
    // Point the service under test at `stack.bootstrap()`, then feed it a cluster:
    stack.publish_trace("tests/fixtures/traces/demo.jsonl").await?;
    // What kubefacts made of it, typed; assert on what your consumer did with the same.
    let runs: Vec<JobRun> = stack.facts("job-run-facts.v1").wait_for(1, Duration::from_secs(60)).await?;
    let failed = runs.iter().filter(|r| r.failed_pods > 0).count();
    println!("{} runs from {}, {failed} with failed pods", runs.len(), stack.bootstrap());
    Ok(())
}
