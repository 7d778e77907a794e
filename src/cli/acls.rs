//! `kubefacts acls`: the Kafka ACLs each component of a pipeline needs (docs/security.md).

use std::path::PathBuf;

use anyhow::bail;
use clap::{Args, ValueEnum};

use kubefacts::acls::{AclOptions, COMPONENTS, acls, to_text};

/// Arguments of `kubefacts acls`.
#[derive(Debug, Args)]
pub struct AclsArgs {
    /// Pipeline file the components run with (default: the embedded default pipeline).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// text: one `kafka-acls.sh --add` line per ACL with why; json: for tools
    /// (scripts/infra/kafka_admin.py acls apply reads it).
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// The components start with `--create-topics` (adds CREATE on their topics).
    #[arg(long)]
    pub create_topics: bool,
    /// A component's principal, `component=User:name` (repeatable; default
    /// `User:kubefacts-<component>`). Components: watcher, process, cleaner, alerts,
    /// session-events.
    #[arg(long = "principal", value_name = "COMPONENT=PRINCIPAL")]
    pub principals: Vec<String>,
    /// Only this component (repeatable).
    #[arg(long = "component")]
    pub components: Vec<String>,
}

/// Output format of `kubefacts acls`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Format {
    /// Commands and reasons.
    Text,
    /// `{"components": [{"component", "principal", "acls": [...]}]}`.
    Json,
}

pub(super) fn run(args: AclsArgs) -> anyhow::Result<()> {
    let pipeline = super::load_pipeline(args.config.as_deref())?;
    let mut principals = Vec::new();
    for p in &args.principals {
        let Some((component, principal)) = p.split_once('=') else {
            bail!("--principal {p:?}: expected COMPONENT=PRINCIPAL, e.g. cleaner=User:kubefacts-cleaner");
        };
        principals.push((component.to_owned(), principal.to_owned()));
    }
    for c in principals.iter().map(|(c, _)| c).chain(&args.components) {
        if !COMPONENTS.contains(&c.as_str()) {
            bail!("unknown component {c:?}: one of {}", COMPONENTS.join(", "));
        }
    }
    let mut list = acls(&pipeline, &AclOptions { create_topics: args.create_topics, principals });
    if !args.components.is_empty() {
        list.retain(|c| args.components.iter().any(|n| n == c.component));
    }
    match args.format {
        Format::Text => print!("{}", to_text(&list)),
        Format::Json => {
            println!("{}", serde_json::to_string_pretty(&serde_json::json!({ "components": list }))?)
        }
    }
    Ok(())
}
