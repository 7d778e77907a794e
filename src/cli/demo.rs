//! `kubefacts demo`: the embedded default.

use clap::Args;

/// Arguments of `kubefacts demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {}

pub(super) fn run(_args: DemoArgs) -> anyhow::Result<()> {
    Ok(())
}
