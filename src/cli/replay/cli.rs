//! `tollgate replay`'s command line: options, output, exit codes. `main.rs` only hands the
//! parsed [`Args`] to [`cli`].

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use super::{Input, Options, ReplayError, Report};

/// `tollgate replay -c FILE LOG…`
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Config to replay against (decided as one exact local state: see docs/src/shadow-to-enforce.md#replay-before-shadow).
    #[arg(short, long, env = "TOLLGATE_CONFIG")]
    pub config: PathBuf,
    /// Access logs, replayed in the order given (oldest first): nginx/Apache combined or
    /// tollgate's JSON access log, detected per file; gzip detected by its magic bytes.
    #[arg(required = true, value_name = "LOG")]
    pub logs: Vec<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Also draw denials per minute per policy into this SVG file.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// JSON logs: the field holding the account value.
    #[arg(long, default_value = "account")]
    pub account_field: String,
    /// Route every request as if it named this host (logs do not record `Host`).
    #[arg(long)]
    pub host: Option<String>,
    /// How many of the most denied keys to list.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
}

/// Run the command: the report on stdout, problems on stderr; exit 0, 2 for a bad config
/// or an unreadable log (as `tollgate check`), 1 otherwise.
pub fn cli(args: Args) -> ExitCode {
    match execute(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            match &e {
                // Exactly what `tollgate check` prints.
                ReplayError::Config(c) => eprintln!("{c}"),
                other => eprintln!("error: {other}"),
            }
            ExitCode::from(e.exit_code())
        }
    }
}

fn execute(args: &Args) -> Result<(), ReplayError> {
    let config = crate::config::load_file(&args.config)?;
    // Every file is opened before any is read: a typo fails at once, not after an hour.
    let inputs = args
        .logs
        .iter()
        .map(|p| Input::open(p))
        .collect::<Result<Vec<_>, _>>()?;
    let options = Options {
        account_field: args.account_field.clone(),
        host: args.host.clone(),
        top: args.top,
        progress: true,
        ..Options::default()
    };
    let report = super::run(&config, &options, inputs)?;
    let mut out = std::io::stdout().lock();
    let written = if args.json {
        serde_json::to_writer_pretty(&mut out, &report)
            .map_err(std::io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write!(out, "{report}")
    };
    written.map_err(ReplayError::Output)?;
    if let Some(path) = &args.plot {
        plot(&report, path)?;
        if !args.json {
            writeln!(out, "plot written to {}", path.display()).map_err(ReplayError::Output)?;
        }
    }
    Ok(())
}

#[cfg(feature = "plot")]
fn plot(report: &Report, path: &std::path::Path) -> Result<(), ReplayError> {
    Ok(super::plot::svg(report, path)?)
}

#[cfg(not(feature = "plot"))]
fn plot(_: &Report, _: &std::path::Path) -> Result<(), ReplayError> {
    Err(ReplayError::NoPlot)
}
