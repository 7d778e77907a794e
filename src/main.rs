//! The `kubefacts` binary: the command line (`cli`, one module per verb) over the library.

mod cli;

use clap::Parser;
use cli::Cli;
use kubefacts::telemetry;

/// mimalloc instead of glibc's malloc: per-record allocations dominate the hot path, and
/// glibc's per-thread arenas kept freed pages resident (docs/BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    let provider = telemetry::init(cli.log_format);
    let result = cli.run().await;
    let _ = provider.shutdown();
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
