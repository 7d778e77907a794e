//! `kubefacts schemas`: what this build writes, and whether its history is compatible.

use anyhow::bail;
use clap::Args;

use kubefacts::codec::{SchemaSet, evolution};

/// Arguments of `kubefacts schemas`.
#[derive(Debug, Args)]
pub struct SchemasArgs {
    /// Exit non-zero unless every schema reads all of its frozen revisions.
    #[arg(long)]
    pub check: bool,
}

pub(super) fn run(args: SchemasArgs) -> anyhow::Result<()> {
    let set = SchemaSet::embedded()?;
    println!("{:<28} {:<44} {:>9} fingerprint", "file", "record", "revisions");
    for s in set.all_current() {
        let revs = set.revisions(&s.stem).len();
        println!("{:<28} {:<44} {:>9} {:016x}", format!("{}.avsc", s.stem), s.full_name, revs, s.fingerprint);
    }
    if args.check {
        let errors = evolution::check_all(set);
        for e in &errors {
            eprintln!("incompatible: {e}");
        }
        if !errors.is_empty() {
            bail!("{} schema evolution problem(s)", errors.len());
        }
        println!("all schemas are BACKWARD_TRANSITIVE against their frozen revisions");
    }
    Ok(())
}
