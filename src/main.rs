use clap::Parser;
use kubefacts::{cli::Cli, telemetry};

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
