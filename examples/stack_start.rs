//! How long a [`KubefactsStack`] takes to start, with and without a registry, `--runs N`
//! times each (default 3): `scripts/image/stack-start.sh` runs it warm, or cold after
//! rebuilding every image. Progress lines show each container's share.
use std::time::{Duration, Instant};

use kubefacts::testcontainers::KubefactsStack;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let runs: usize = match (args.next().as_deref(), args.next()) {
        (None, _) => 3,
        (Some("--runs"), Some(n)) => n.parse::<usize>()?.max(1),
        _ => return Err("usage: stack_start [--runs N]".into()),
    };
    let mut table = Vec::new();
    for registry in [false, true] {
        let mut times = Vec::with_capacity(runs);
        for _ in 0..runs {
            let t = Instant::now();
            let stack = KubefactsStack::builder().with_registry(registry).start().await?;
            times.push(t.elapsed());
            // Teardown is part of a test's time too, but not of its start.
            drop(stack);
        }
        table.push((if registry { "kafka + registry + process" } else { "kafka + process" }, times));
    }
    let secs = |d: &Duration| format!("{:>7.1}", d.as_secs_f64());
    let images = kubefacts::testcontainers::Images::from_env();
    println!(
        "\nstack start, seconds ({runs} runs each; images {}, {}, {})",
        images.kafka, images.registry, images.kubefacts
    );
    for (name, times) in &table {
        let mut sorted = times.clone();
        sorted.sort();
        let runs: Vec<String> = times.iter().map(secs).collect();
        println!("  {name:<28}{}   median {}", runs.join(""), secs(&sorted[sorted.len() / 2]));
    }
    Ok(())
}
