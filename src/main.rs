//! The `tollgate` command line: a thin shell over the library (see `lib.rs` for the map).

#![forbid(unsafe_code)]

/// The binary's own part of `src/cli/`, beside the library's tools (`tollgate::cli`).
mod cli {
    pub mod simulate_args;
}

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use cli::simulate_args::{SimulateArgs, simulate};
use tollgate::telemetry::{self, AccessBuffer, AccessFile, AccessLog, LogFormat};

/// A proxy allocates and frees small buffers and header maps on every request; glibc's
/// malloc spent ~9 % of the request path's CPU on that (perf, benches/load.sh load).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "HTTP reverse proxy with distributed rate limiting",
    after_help = "Docs: docs/src/SUMMARY.md (a book by task; scripts/docs.sh builds it)"
)]
struct Cli {
    /// Log format (level comes from RUST_LOG, default info).
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_LOG_FORMAT",
        value_enum,
        default_value = "text"
    )]
    log_format: LogFormat,
    /// `serve`'s `--access-log-buffer`, written before the subcommand (`tollgate
    /// --access-log-buffer 0 serve …`, as command lines could when it was global): hidden,
    /// as `serve --help` documents it.
    #[arg(
        long = "access-log-buffer",
        value_name = "ACCESS_LOG_BUFFER",
        hide = true,
        value_parser = access_log_buffer
    )]
    early_access_log_buffer: Option<u32>,
    /// `serve`'s `--access-log-flush`, written before the subcommand (hidden, as above).
    #[arg(
        long = "access-log-flush",
        value_name = "ACCESS_LOG_FLUSH",
        hide = true,
        value_parser = flush_interval
    )]
    early_access_log_flush: Option<Duration>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    #[command(after_help = "Docs: docs/src/operating.md (the book: scripts/docs.sh)")]
    Serve {
        /// Config file.
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
        #[command(flatten)]
        access_log: AccessLogArgs,
    },
    /// Validate a config: exit 0 when valid, else print every problem and exit 2.
    #[command(
        after_help = "Docs: docs/src/reference/index.md (every key, its default and its error)"
    )]
    Check {
        /// Config file to validate.
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
    },
    /// Validate a config, then ask the gateway running it to reload it (POST /reload on its
    /// admin_listen): exit 0 when reloaded, 2 when the file is invalid, 1 otherwise.
    #[command(after_help = "Docs: docs/src/operating.md#reloading-the-config")]
    Reload {
        /// Config file: validated here, then reloaded by the gateway at its
        /// [server] admin_listen (with its admin_token_env token).
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
    },
    /// What the policies in shadow mode would have denied, from a running gateway's admin
    /// listener (GET /shadow): per policy, would-be denials, keys, top keys' share and
    /// suggested limits.
    #[command(after_help = "Docs: docs/src/shadow-to-enforce.md#watching-shadow-mode-live")]
    ShadowReport(tollgate::server::ShadowReportArgs),
    /// Run the shipped config against a built-in sample upstream and show what happens.
    #[command(after_help = "Docs: docs/src/getting-started.md#the-two-commands")]
    Demo,
    /// Compare the decision sites (central, static L/N, leases, owner, gossip) on one virtual-clock trace.
    #[command(after_help = "Docs: docs/src/decision-sites.md#simulator")]
    Simulate(SimulateArgs),
    /// Replay access logs through the router and limiter on a virtual clock: what a config would have allowed and denied.
    #[command(after_help = "Docs: docs/src/shadow-to-enforce.md#replay-before-shadow")]
    Replay(tollgate::cli::replay::Args),
    /// Write a self-signed development certificate for localhost.
    #[cfg(feature = "dev-certs")]
    #[command(after_help = "Docs: certs/README.md")]
    Certs {
        /// Folder to write localhost.pem and localhost-key.pem into.
        #[arg(long, default_value = "certs")]
        out: PathBuf,
    },
}

/// `tollgate serve`'s access log: its file and buffer (serve-only: other subcommands write no access log,
/// and a bad `TOLLGATE_ACCESS_LOG_*` value must not fail them).
#[derive(clap::Args)]
struct AccessLogArgs {
    /// Access log buffer, in bytes (at most 64 MiB): lines are written when it fills, when
    /// the flush interval passes and when the gateway stops; 0 writes each line at once.
    #[arg(
        long,
        env = "TOLLGATE_ACCESS_LOG_BUFFER",
        default_value_t = 65536,
        value_parser = access_log_buffer
    )]
    access_log_buffer: u32,
    /// The longest an access line waits in that buffer (e.g. 1s, 250ms; more than 0).
    #[arg(
        long,
        env = "TOLLGATE_ACCESS_LOG_FLUSH",
        default_value = "1s",
        value_parser = flush_interval
    )]
    access_log_flush: Duration,
    /// Write the access log to FILE (appended to, created mode 0640) instead of stderr;
    /// every other line stays on stderr. SIGUSR1 reopens FILE by its path, for log
    /// rotation. Wins over the config's [server] access_log.
    #[arg(long = "access-log", env = "TOLLGATE_ACCESS_LOG", value_name = "FILE")]
    access_log_file: Option<PathBuf>,
}

/// Exit code for a config that does not load (documented in the README).
const EXIT_BAD_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match tollgate::config::load_file(&config) {
            Ok(cfg) => {
                // Warnings go to stderr and do not change the exit code.
                for w in cfg.warnings() {
                    eprintln!("{}: warning: {}: {}", config.display(), w.key, w.message);
                }
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        },
        Command::Serve { config, access_log } => {
            let workers = match workers_from_env() {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
            };
            // Before logging starts: `[server] access_log` says where the access log goes.
            let cfg = match tollgate::config::load_file(&config) {
                Ok(c) if !c.has_server && c.rls.is_none() => {
                    eprintln!(
                        "{}: server: missing table [server] with its `listen`: this file configures tower layers only ([layers.NAME]), which a gateway does not serve",
                        config.display()
                    );
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
            };
            let file = match access_file(access_log.access_log_file.as_deref(), &cfg) {
                Ok(f) => f,
                Err(code) => return code,
            };
            // Written before the subcommand, a setting wins over the environment's.
            let buffer = AccessBuffer {
                bytes: cli
                    .early_access_log_buffer
                    .unwrap_or(access_log.access_log_buffer) as usize,
                flush: cli
                    .early_access_log_flush
                    .unwrap_or(access_log.access_log_flush),
            };
            let access = AccessLog { buffer, file };
            let _log = telemetry::init(cli.log_format, "info", Some(access));
            // What `check` warns about is said at start-up too, once, in the log.
            for w in cfg.warnings() {
                tracing::warn!(file = %config.display(), key = %w.key, "{}", w.message);
            }
            report(runtime(workers).and_then(|rt| rt.block_on(serve(cfg, workers))))
        }
        Command::Demo => {
            // The demo prints its own table; only warnings go to the log.
            let _log = telemetry::init(cli.log_format, "warn", None);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build();
            report(
                rt.context("starting the async runtime")
                    .and_then(|rt| rt.block_on(tollgate::cli::demo::run()).map_err(Into::into)),
            )
        }
        Command::Reload { config } => reload(&config),
        Command::ShadowReport(args) => tollgate::server::shadow_report(args),
        Command::Simulate(args) => report(simulate(args)),
        Command::Replay(args) => tollgate::cli::replay::cli(args),
        #[cfg(feature = "dev-certs")]
        Command::Certs { out } => report(
            tollgate::certs::write(&out)
                .map(|(c, k)| println!("wrote {} and {}", c.display(), k.display()))
                .map_err(Into::into),
        ),
    }
}

/// The largest access log buffer: a buffer that never fills, under a long flush interval,
/// would hold a busy gateway's lines in memory for that long.
const MAX_ACCESS_LOG_BUFFER: i64 = 64 << 20;

/// `--access-log-buffer`: bytes, at most [`MAX_ACCESS_LOG_BUFFER`].
fn access_log_buffer(s: &str) -> Result<u32, String> {
    let n: u32 = s
        .parse()
        .map_err(|e: std::num::ParseIntError| e.to_string())?;
    if i64::from(n) > MAX_ACCESS_LOG_BUFFER {
        return Err(format!("{n} is not in 0..={MAX_ACCESS_LOG_BUFFER}"));
    }
    Ok(n)
}

/// `--access-log-flush`: a duration above zero (a zero interval would spin its thread).
fn flush_interval(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be more than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

/// The access log's file: `--access-log` (relative to the working directory) over
/// `[server] access_log` (resolved against the config's folder). Opened before logging
/// starts, so a path that cannot be written stops the gateway with a message naming it
/// rather than losing the log: exit 1 for the flag, 2 (a bad config) for the key.
fn access_file(
    flag: Option<&std::path::Path>,
    cfg: &tollgate::config::Config,
) -> Result<Option<AccessFile>, ExitCode> {
    if let Some(path) = flag {
        return AccessFile::open(path).map(Some).map_err(|e| {
            eprintln!("error: --access-log: {e}");
            ExitCode::FAILURE
        });
    }
    let Some(path) = &cfg.server.access_log else {
        return Ok(None);
    };
    AccessFile::open(path).map(Some).map_err(|e| {
        eprintln!("{}: server.access_log: {e}", cfg.origin.display());
        ExitCode::from(EXIT_BAD_CONFIG)
    })
}

async fn serve(cfg: tollgate::config::Config, workers: Option<usize>) -> anyhow::Result<()> {
    // Signal handlers first: a SIGHUP or SIGUSR1 during startup must not kill the process.
    let signals = tollgate::shutdown::signals();
    let (stop, hurry) = (signals.stop(), signals.hurry());
    tokio::spawn(telemetry::reopen_access_log_on(signals.reopens));
    let mut server = tollgate::server::Server::bind(cfg)
        .await
        .context("starting tollgate")?
        .reload_on(signals.hangups)
        .hurry_on(hurry);
    if let Some(n) = workers {
        server = server.workers(n);
    }
    server.try_run(stop).await.context("starting tollgate")
}

/// `tollgate reload`: the file is checked here first (the same messages and exit code as
/// `check`), so a typo is caught before the running gateway is asked.
fn reload(path: &std::path::Path) -> ExitCode {
    let cfg = match tollgate::config::load_file(path) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_BAD_CONFIG);
        }
    };
    let asked = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
        .and_then(|rt| Ok(rt.block_on(tollgate::server::request_reload(&cfg))?));
    match asked {
        Ok((200, body)) => {
            print!("{body}");
            match reloaded_another_file(&cfg.origin, &body) {
                Some(theirs) => {
                    eprintln!(
                        "reload: the gateway at that admin listener runs {theirs}, not {}: it re-read {theirs} (its answer is above) and {} is not running there; edit {theirs}, or ask the gateway started with {}",
                        cfg.origin.display(),
                        cfg.origin.display(),
                        cfg.origin.display()
                    );
                    ExitCode::FAILURE
                }
                None => ExitCode::SUCCESS,
            }
        }
        Ok((status, body)) => {
            eprint!("reload refused ({status}): {body}");
            ExitCode::FAILURE
        }
        Err(e) => report(Err(e)),
    }
}

/// The file a reload's answer names when it is not `asked` (the gateway reloads the file it
/// was started with, whatever `-c` names): `None` when they are the same file, or when the
/// answer names none (a gateway older than the field).
fn reloaded_another_file(asked: &std::path::Path, body: &str) -> Option<String> {
    let answer: serde_json::Value = serde_json::from_str(body).ok()?;
    let theirs = answer.get("file")?.as_str()?;
    let same = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    (same(asked) != same(std::path::Path::new(theirs))).then(|| theirs.to_string())
}

/// `TOLLGATE_WORKERS=N`: how many worker threads serve connections (benchmarks use 2);
/// unset or empty means one per core. Anything but a whole number of at least 1 is refused
/// rather than guessed at.
fn workers_from_env() -> Result<Option<usize>, String> {
    let Some(v) = std::env::var_os("TOLLGATE_WORKERS") else {
        return Ok(None);
    };
    let v = v.to_string_lossy();
    if v.trim().is_empty() {
        return Ok(None);
    }
    match v.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(format!(
            "TOLLGATE_WORKERS must be a whole number of at least 1 (got {v:?}); unset it for one worker per core"
        )),
    }
}

/// The runtime that accepts connections and runs the admin listener and background tasks;
/// `TOLLGATE_WORKERS` bounds it too, so the process uses about that many cores.
fn runtime(workers: Option<usize>) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = workers {
        b.worker_threads(n);
    }
    b.enable_all().build().context("starting the async runtime")
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
