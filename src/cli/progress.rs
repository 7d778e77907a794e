//! A progress line on stderr for verbs that can run longer than a second (`demo`, `replay`,
//! `publish`, `simulate`). It draws only on a terminal, never before a second has passed,
//! and at most five times a second, so short runs and logs piped to files stay clean.
//! `indicatif` draws and clears the line; the text is ours.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::{
    cell::Cell,
    io::{IsTerminal, Read},
    rc::Rc,
    time::{Duration, Instant},
};

/// Nothing is drawn before this: a run that ends sooner shows no bar at all.
const QUIET_FOR: Duration = Duration::from_secs(1);
const REDRAW_EVERY: Duration = Duration::from_millis(200);
const BAR_CELLS: usize = 24;

/// A progress line: `label [████░░░░]  42% 1.2/2.9 GiB · 812,345 entries · 95,120/s · eta 12 s`.
#[derive(Debug)]
pub(crate) struct Progress {
    label: &'static str,
    unit: &'static str,
    /// What `done` counts up to (bytes of a file, milliseconds of stream time); `None`: unknown.
    total: Option<u64>,
    total_is_bytes: bool,
    started: Instant,
    last_draw: Option<Instant>,
    /// Made at the first draw, so a short run never touches the terminal.
    bar: Option<ProgressBar>,
    calls: u32,
    enabled: bool,
}

impl Progress {
    /// A progress line counting `unit`s (e.g. "entries") towards `total` (bytes when
    /// `total_is_bytes`, else any measure of `done`).
    pub(crate) fn new(
        label: &'static str,
        unit: &'static str,
        total: Option<u64>,
        total_is_bytes: bool,
    ) -> Self {
        Self {
            label,
            unit,
            total,
            total_is_bytes,
            started: Instant::now(),
            last_draw: None,
            bar: None,
            calls: 0,
            enabled: std::io::stderr().is_terminal(),
        }
    }

    /// Reports `done` (towards the total) and `items` processed; cheap enough to call per
    /// item (the clock is read once in 256 calls).
    pub(crate) fn update(&mut self, done: u64, items: u64) {
        self.calls = self.calls.wrapping_add(1);
        if !self.enabled || !self.calls.is_multiple_of(256) {
            return;
        }
        let now = Instant::now();
        if now - self.started < QUIET_FOR || self.last_draw.is_some_and(|t| now - t < REDRAW_EVERY) {
            return;
        }
        self.last_draw = Some(now);
        let line = self.line(done, items, (now - self.started).as_secs_f64());
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(5));
            bar.set_style(
                ProgressStyle::with_template("{msg}").unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar
        });
        bar.set_message(line);
    }

    /// Clears the line (if one was drawn).
    pub(crate) fn finish(&mut self) {
        self.last_draw = None;
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn line(&self, done: u64, items: u64, secs: f64) -> String {
        let rate = items as f64 / secs.max(1e-9);
        let mut line = format!("{} ", self.label);
        if let Some(total) = self.total.filter(|t| *t > 0) {
            let fraction = (done as f64 / total as f64).clamp(0.0, 1.0);
            let filled = (fraction * BAR_CELLS as f64).round() as usize;
            line.push('[');
            line.extend(std::iter::repeat_n('█', filled));
            line.extend(std::iter::repeat_n('░', BAR_CELLS - filled));
            line.push_str(&format!("] {:>3.0}% ", fraction * 100.0));
            if self.total_is_bytes {
                line.push_str(&format!("{:.1}/{:.1} MiB · ", mib(done), mib(total)));
            }
            if fraction > 0.0 {
                line.push_str(&format!("eta {:.0} s · ", secs * (1.0 - fraction) / fraction));
            }
        }
        line.push_str(&format!("{} {} · {}/s", thousands(items), self.unit, thousands(rate as u64)));
        line
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// `1234567` → `1,234,567`.
pub(crate) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A reader that counts the bytes read through it, for a progress bar over a file.
#[derive(Debug)]
pub(crate) struct CountingRead<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> CountingRead<R> {
    /// Wraps `inner`; the returned counter follows the bytes read.
    pub(crate) fn new(inner: R) -> (Self, Rc<Cell<u64>>) {
        let read = Rc::new(Cell::new(0));
        (Self { inner, read: Rc::clone(&read) }, read)
    }
}

impl<R: Read> Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_groups_digits() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1000), "1,000");
        assert_eq!(thousands(1234567), "1,234,567");
    }

    #[test]
    fn line_shows_bar_share_and_rate() {
        let p = Progress::new("replay", "entries", Some(4 * 1024 * 1024), true);
        let line = p.line(1024 * 1024, 5000, 2.0);
        assert!(line.starts_with("replay [██████░░░░░░░░░░░░░░░░░░]  25% 1.0/4.0 MiB"), "{line}");
        assert!(line.contains("eta 6 s") && line.ends_with("5,000 entries · 2,500/s"), "{line}");
        let unknown = Progress::new("publish", "entries", None, false);
        assert_eq!(unknown.line(0, 10, 1.0), "publish 10 entries · 10/s");
    }

    #[test]
    fn counting_reader_counts() {
        let (mut r, read) = CountingRead::new(&b"hello world"[..]);
        let mut buf = [0u8; 4];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(read.get(), 4);
        std::io::copy(&mut r, &mut std::io::sink()).unwrap();
        assert_eq!(read.get(), 11);
    }
}
