//! `tollgate replay`: recorded access logs through the real router and limiter on a
//! virtual clock read from the logs' timestamps, to see what a config would have allowed
//! and denied before it meets traffic (replay → shadow → enforce). Command-line layer:
//! nothing on the request path imports it.
//!
//! The walk: `source.rs` opens each file (gzip by magic bytes), `parse.rs`/`json.rs` turn
//! lines into records (format detected per file; `json_plain.rs` and `json_scan.rs` are
//! the JSON scanners, `ip.rs` reads the client address, `time.rs` the timestamp),
//! `run.rs` decides each record with the gateway's own code and counts it in `tally.rs`,
//! `report.rs` prints the result and `plot.rs` draws denials per minute. `cli.rs` is the
//! command line.

mod cli;
mod ip;
mod json;
mod json_plain;
mod json_scan;
mod parse;
#[cfg(feature = "plot")]
mod plot;
mod report;
mod run;
mod source;
mod tally;
mod time;

use std::io::IsTerminal;
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

pub use cli::{Args, cli};
pub use parse::{Format, Malformed, Record, parse_line};
pub use report::Report;
pub use source::Input;

use crate::config::{Config, ConfigError};
use report::{FileReport, MalformedLine};
use run::Replayer;

/// Why a replay could not run. Bad input lines are no error: they are counted and skipped.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The config does not load: the same message as `tollgate check`.
    #[error("{0}")]
    Config(#[from] ConfigError),
    /// A log file cannot be opened or read (or its gzip stream is corrupt).
    #[error("cannot read log file {file}: {source}")]
    Read {
        file: String,
        source: std::io::Error,
    },
    #[error("cannot build the limiter: {0}")]
    Limiter(#[from] crate::limit::LimiterError),
    #[error("cannot start the replay's runtime: {0}")]
    Runtime(std::io::Error),
    /// The report could not be written (stdout closed, say).
    #[error("writing the report: {0}")]
    Output(std::io::Error),
    #[cfg(feature = "plot")]
    #[error(transparent)]
    Plot(#[from] plot::PlotError),
    #[cfg(not(feature = "plot"))]
    #[error("--plot needs tollgate built with the `plot` feature (on by default)")]
    NoPlot,
}

impl ReplayError {
    /// 2 for bad input the user must fix (config, unreadable log), as `check` exits on a
    /// bad config; 1 for everything else.
    pub fn exit_code(&self) -> u8 {
        match self {
            ReplayError::Config(_) | ReplayError::Read { .. } => 2,
            _ => 1,
        }
    }
}

/// How to replay.
#[derive(Debug, Clone)]
pub struct Options {
    /// JSON logs: the field naming the account.
    pub account_field: String,
    /// The host every request is routed as (logs do not record `Host`).
    pub host: Option<String>,
    /// How many top denied keys to report.
    pub top: usize,
    /// How many malformed lines to show (all are counted).
    pub show_malformed: usize,
    /// Draw a progress bar on stderr (only when it is a terminal).
    pub progress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            account_field: "account".into(),
            host: None,
            top: 10,
            show_malformed: 5,
            progress: false,
        }
    }
}

/// Replay `inputs`, in order, against `config`.
pub fn run(config: &Config, options: &Options, inputs: Vec<Input>) -> Result<Report, ReplayError> {
    let started = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(ReplayError::Runtime)?;
    let mut replayer = Replayer::new(run::local_config(config), options.host.clone())?;
    let bar = progress_bar(&inputs, options.progress);
    let mut shown = Vec::new();
    let files = rt.block_on(async {
        let mut files = Vec::with_capacity(inputs.len());
        for input in inputs {
            files.push(replay_file(&mut replayer, input, options, &bar, &mut shown).await?);
        }
        Ok::<_, ReplayError>(files)
    })?;
    bar.finish_and_clear();
    let mut report = Report::new(config, replayer.tally, files, shown, options.top);
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Bytes of every file, when drawing one is wanted and stderr is a terminal.
fn progress_bar(inputs: &[Input], wanted: bool) -> ProgressBar {
    if !wanted || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(inputs.iter().map(|i| i.size).sum());
    bar.set_style(
        ProgressStyle::with_template("{bar:40} {bytes}/{total_bytes} {msg} (eta {eta})")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// Lines between two progress updates: often enough for the eye, rare enough to cost
/// nothing per line.
const PROGRESS_EVERY: u64 = 1 << 16;

async fn replay_file(
    replayer: &mut Replayer,
    mut input: Input,
    options: &Options,
    bar: &ProgressBar,
    shown: &mut Vec<MalformedLine>,
) -> Result<FileReport, ReplayError> {
    bar.set_message(input.name.clone());
    let done_before = bar.position();
    let mut file = FileReport {
        file: input.name.clone(),
        format: None,
        gzip: input.gzip,
        lines: 0,
        requests: 0,
        malformed: 0,
        skipped: 0,
    };
    let mut format = None;
    let read = input.read.clone();
    let mut buf = Vec::new();
    while let Some(line) = input.next_line(&mut buf)? {
        file.lines += 1;
        if file.lines.is_multiple_of(PROGRESS_EVERY) {
            bar.set_position(done_before + read.get());
        }
        let f = match format {
            Some(f) => f,
            None if line.trim_ascii().is_empty() => {
                file.skipped += 1;
                continue;
            }
            None => *format.insert(Format::detect(line)),
        };
        match parse_line(f, line, &options.account_field) {
            Ok(Some(record)) => {
                file.requests += 1;
                replayer.record(&record).await;
            }
            Ok(None) => file.skipped += 1,
            Err(Malformed(reason)) => {
                file.malformed += 1;
                if shown.len() < options.show_malformed {
                    let m = MalformedLine {
                        file: file.file.clone(),
                        line: file.lines,
                        reason,
                    };
                    bar.suspend(|| {
                        eprintln!(
                            "{}:{}: malformed line skipped: {}",
                            m.file, m.line, m.reason
                        )
                    });
                    shown.push(m);
                }
            }
        }
    }
    file.format = format.map(Format::name);
    bar.set_position(done_before + input.size.max(input.read.get()));
    Ok(file)
}
