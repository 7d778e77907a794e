//! `kubefacts simulate`: writes a deterministic cluster trace of a simulated batch fleet
//! (`docs/SIMULATE.md`) and prints what it generated on stderr.

use std::{
    fs::File,
    io::{BufWriter, Write},
    path::PathBuf,
    time::Instant,
};

use anyhow::Context;
use clap::Args;

use super::progress::Progress;
use kubefacts::simulate::{self, SimulationStats};

/// Arguments of `kubefacts simulate`.
#[derive(Debug, Args)]
pub struct SimulateArgs {
    /// Which fleet, for how long.
    #[command(flatten)]
    pub fleet: FleetArgs,
    /// Start of the trace, RFC 3339 (rounded down to a minute).
    #[arg(long, default_value = "2026-11-01T00:00:00Z")]
    pub start: String,
    /// Where to write the trace; `-` for stdout.
    #[arg(long)]
    pub output: PathBuf,
}

/// A simulated fleet: what `simulate` writes and `demo` runs.
#[derive(Debug, Args)]
pub struct FleetArgs {
    /// The fleet profile: small, medium or large (docs/SIMULATE.md).
    #[arg(long, default_value = "small")]
    pub profile: String,
    /// Hours of cluster time to simulate (default: the profile's).
    #[arg(long)]
    pub hours: Option<u32>,
    /// Seed: the same profile, hours, start and seed give the same bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

impl FleetArgs {
    /// The profile and the hours to simulate, checked.
    pub fn resolve(&self) -> anyhow::Result<(simulate::Profile, u32)> {
        let profile = simulate::profile(&self.profile)?;
        let hours = simulate::check_hours(self.hours.unwrap_or(profile.default_hours))?;
        Ok((profile, hours))
    }
}

/// Counts bytes written through it.
struct Counting<W> {
    inner: W,
    bytes: u64,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

pub(super) fn run(args: SimulateArgs) -> anyhow::Result<()> {
    let (profile, hours) = args.fleet.resolve()?;
    let start: jiff::Timestamp =
        args.start.parse().with_context(|| format!("--start {:?} is not RFC 3339", args.start))?;
    let sink: Box<dyn Write> = if args.output.as_os_str() == "-" {
        Box::new(std::io::stdout().lock())
    } else {
        Box::new(File::create(&args.output).with_context(|| format!("creating {}", args.output.display()))?)
    };
    let mut out = Counting { inner: BufWriter::with_capacity(1 << 20, sink), bytes: 0 };
    let started = Instant::now();
    let mut sim = simulate::simulate_from(&profile, hours, args.fleet.seed, start.as_millisecond());
    let span_ms = u64::from(hours) * 3_600_000;
    let mut progress = Progress::new("simulate", "entries", Some(span_ms), false);
    let mut entries = 0u64;
    for entry in sim.by_ref() {
        entry.write_line(&mut out).context("writing the trace")?;
        entries += 1;
        progress.update((entry.observed_at_ms - start.as_millisecond()).max(0) as u64, entries);
    }
    out.flush().context("writing the trace")?;
    progress.finish();
    let secs = started.elapsed().as_secs_f64();
    eprintln!("{}", summary(profile.name, hours, args.fleet.seed, sim.stats(), out.bytes, secs));
    Ok(())
}

fn summary(profile: &str, hours: u32, seed: u64, s: &SimulationStats, bytes: u64, secs: f64) -> String {
    format!(
        "simulate: profile {profile}, {hours} h, seed {seed}\n\
         \x20 entries           {entries} ({bytes} bytes, {per:.0} bytes/entry)\n\
         \x20 cronjobs          {cj} ({susp} suspended); bare jobs {bare}; jobs created {created}\n\
         \x20 finished runs     {runs}: succeeded first try {ok1}, after retries {okr}, BackoffLimitExceeded {bl}, DeadlineExceeded {dl}\n\
         \x20 schedules         forbid-skipped {fs}, replaced {rep}, missed in outages {miss}\n\
         \x20 pods              {pods}; exits 0/Completed {e0}, 1/Error {e1}, 137/OOMKilled {e137}, 143/Error {e143}\n\
         \x20 deletions         history limit {hist}, ttl {ttl}, while unobserved {unobs}\n\
         \x20 watcher           relists {relists}, heartbeats {hb}\n\
         \x20 leases            renewals {renew}, controller-manager outages {outages}\n\
         \x20 sessions          {sessions} ({supd} SESSION lines)\n\
         \x20 took              {secs:.2} s ({rate:.0} entries/s, {mbps:.1} MB/s)",
        entries = s.entries,
        per = bytes as f64 / s.entries.max(1) as f64,
        cj = s.cronjobs,
        susp = s.suspended_cronjobs,
        bare = s.bare_jobs,
        created = s.jobs_created,
        runs = s.finished_runs(),
        ok1 = s.succeeded_first_try,
        okr = s.succeeded_after_retries,
        bl = s.backoff_limit_exceeded,
        dl = s.deadline_exceeded,
        fs = s.forbid_skips,
        rep = s.replaced,
        miss = s.missed_schedules,
        pods = s.pods,
        e0 = s.exits_completed,
        e1 = s.exits_error,
        e137 = s.exits_oom_killed,
        e143 = s.exits_terminated,
        hist = s.history_deletions,
        ttl = s.ttl_deletions,
        unobs = s.deleted_while_unobserved,
        relists = s.relists,
        hb = s.heartbeats,
        renew = s.lease_renewals,
        outages = s.lease_outages,
        sessions = s.sessions,
        supd = s.session_updates,
        rate = s.entries as f64 / secs.max(1e-9),
        mbps = bytes as f64 / 1e6 / secs.max(1e-9),
    )
}
