//! The `tollgate` command line: a thin shell over the library (see `lib.rs` for the map).

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tollgate::telemetry::{self, AccessBuffer, LogFormat};

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
    /// Access log buffer of `serve`, in bytes (at most 64 MiB): lines are written when it
    /// fills, when the flush interval passes and when the gateway stops; 0 writes each line
    /// at once.
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_ACCESS_LOG_BUFFER",
        default_value_t = 65536,
        value_parser = clap::value_parser!(u32).range(..=MAX_ACCESS_LOG_BUFFER)
    )]
    access_log_buffer: u32,
    /// The longest an access line waits in that buffer (e.g. 1s, 250ms; more than 0).
    #[arg(
        long,
        global = true,
        env = "TOLLGATE_ACCESS_LOG_FLUSH",
        default_value = "1s",
        value_parser = flush_interval
    )]
    access_log_flush: Duration,
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
    },
    /// Validate a config: exit 0 when valid, else print every problem and exit 2.
    #[command(
        after_help = "Docs: docs/src/reference/index.md (every key, its default and its error)"
    )]
    Check {
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
    },
    /// Validate a config, then ask the gateway running it to reload it (POST /reload on its
    /// admin_listen): exit 0 when reloaded, 2 when the file is invalid, 1 otherwise.
    #[command(after_help = "Docs: docs/src/operating.md#reloading-the-config")]
    Reload {
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
    Replay(tollgate::replay::Args),
    /// Write a self-signed development certificate for localhost.
    #[cfg(feature = "dev-certs")]
    #[command(after_help = "Docs: certs/README.md")]
    Certs {
        /// Folder to write localhost.pem and localhost-key.pem into.
        #[arg(long, default_value = "certs")]
        out: PathBuf,
    },
}

/// `tollgate simulate` options; the defaults are the design document's experiment.
#[derive(clap::Args)]
struct SimulateArgs {
    /// Nodes behind the balancer (weights default to equal shares when this is given alone).
    #[arg(long)]
    nodes: Option<usize>,
    /// Balancer weight per node, e.g. 40,20,10,10,5,5,5,5.
    #[arg(long, value_delimiter = ',')]
    weights: Option<Vec<u64>>,
    /// Requests offered.
    #[arg(long, default_value_t = 20_000)]
    requests: usize,
    /// Offered rate as a multiple of the limit (2 = the document's overload).
    #[arg(long, default_value_t = 2.0)]
    load: f64,
    /// A normal-load run: offered rate 0.5x the limit (overrides --load).
    #[arg(long)]
    normal: bool,
    /// Policy limit per second.
    #[arg(long, default_value_t = 1_000)]
    limit: u32,
    /// Policy burst.
    #[arg(long, default_value_t = 96)]
    burst: u32,
    /// Trace seed (decimal or 0x hex).
    #[arg(long, default_value = "0x9E3779B97F4A7C15", value_parser = parse_seed)]
    seed: u64,
    /// Tollgate lease: most cells per grant.
    #[arg(long, default_value_t = 50)]
    lease_max: u32,
    /// Tollgate lease: cell lifetime past conformance.
    #[arg(long, default_value = "50ms", value_parser = humantime::parse_duration)]
    lease_ttl: std::time::Duration,
    /// Tollgate lease: traffic a batch should cover.
    #[arg(long, default_value = "20ms", value_parser = humantime::parse_duration)]
    lease_target: std::time::Duration,
    /// Runs per design for the decisions/s column.
    #[arg(long, default_value_t = 20)]
    reps: usize,
    /// Gossip: push intervals, one row each.
    #[arg(long, value_delimiter = ',', default_value = "5ms,20ms,100ms", value_parser = humantime::parse_duration)]
    gossip_interval: Vec<std::time::Duration>,
    /// Gossip: network delay of a push to a peer.
    #[arg(long, default_value = "1ms", value_parser = humantime::parse_duration)]
    peer_delay: std::time::Duration,
    /// Print JSON instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw admitted requests per 100 ms per design into this SVG file.
    #[arg(long)]
    plot: Option<PathBuf>,
    /// Run both lease designs over the fixed matrix of traces and check tollgate's lease
    /// against its goals on each (only the --lease-* options and --json apply).
    #[arg(long, conflicts_with = "plot")]
    matrix: bool,
}

fn parse_seed(s: &str) -> Result<u64, String> {
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    }
    .map_err(|e| format!("`{s}` is not a seed: {e}"))
}

fn simulate(a: SimulateArgs) -> anyhow::Result<()> {
    use std::num::NonZeroU32;
    let nz = |v: u32, what: &str| {
        NonZeroU32::new(v).with_context(|| format!("--{what} must be at least 1"))
    };
    let weights = match (a.weights, a.nodes) {
        (Some(w), Some(n)) if w.len() != n => {
            anyhow::bail!("--weights has {} entries but --nodes is {n}", w.len())
        }
        (Some(w), _) => w,
        (None, Some(n)) => vec![1; n],
        (None, None) => tollgate::simulate::trace::SEED_WEIGHTS.to_vec(),
    };
    anyhow::ensure!(
        !weights.is_empty() && weights.iter().any(|&w| w > 0),
        "--weights needs at least one non-zero weight"
    );
    let load = if a.normal { 0.5 } else { a.load };
    anyhow::ensure!(load > 0.0 && load.is_finite(), "--load must be positive");
    anyhow::ensure!(a.requests > 0, "--requests must be at least 1");
    // The same ranges as a lease policy's knobs in the config (config/validate/limits.rs).
    anyhow::ensure!(
        (1..=100_000).contains(&a.lease_max),
        "--lease-max must be 1 to 100000 (got {})",
        a.lease_max
    );
    let span = tollgate::config::MIN_PERIOD..=std::time::Duration::from_secs(3600);
    for (option, d) in [("lease-ttl", a.lease_ttl), ("lease-target", a.lease_target)] {
        anyhow::ensure!(
            span.contains(&d),
            "--{option} must be at least 1ms and at most 1h (got {})",
            humantime::format_duration(d)
        );
    }
    anyhow::ensure!(
        a.lease_target <= a.lease_ttl,
        "--lease-ttl ({}) must be no shorter than --lease-target ({}): batches would expire before they are spent",
        humantime::format_duration(a.lease_ttl),
        humantime::format_duration(a.lease_target)
    );
    for &d in &a.gossip_interval {
        anyhow::ensure!(
            span.contains(&d),
            "--gossip-interval must be at least 1ms and at most 1h (got {})",
            humantime::format_duration(d)
        );
    }
    anyhow::ensure!(
        a.peer_delay <= std::time::Duration::from_secs(3600),
        "--peer-delay must be at most 1h (got {})",
        humantime::format_duration(a.peer_delay)
    );
    let options = tollgate::simulate::Options {
        weights,
        requests: a.requests,
        load,
        limit: nz(a.limit, "limit")?,
        burst: nz(a.burst, "burst")?,
        seed: a.seed,
        lease: tollgate::config::LeaseKnobs {
            max: nz(a.lease_max, "lease-max")?,
            ttl: a.lease_ttl,
            target: a.lease_target,
        },
        reps: a.reps,
        gossip_intervals: a.gossip_interval,
        peer_delay: a.peer_delay,
    };
    if a.matrix {
        let m = tollgate::simulate::matrix::run(&options);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&m)?);
        } else {
            print!("{m}");
        }
        return Ok(());
    }
    let report = tollgate::simulate::run(&options);
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{report}");
    }
    if let Some(path) = a.plot {
        plot(&report, &path)?;
        if !a.json {
            println!("plot written to {}", path.display());
        }
    }
    Ok(())
}

#[cfg(feature = "plot")]
fn plot(report: &tollgate::simulate::Report, path: &std::path::Path) -> anyhow::Result<()> {
    Ok(tollgate::simulate::svg(report, path)?)
}

#[cfg(not(feature = "plot"))]
fn plot(_: &tollgate::simulate::Report, _: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!("--plot needs tollgate built with the `plot` feature (on by default)")
}

/// Exit code for a config that does not load (documented in the README).
const EXIT_BAD_CONFIG: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Check { config } => match tollgate::config::load_file(&config) {
            Ok(_) => {
                println!("{}: ok", config.display());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(EXIT_BAD_CONFIG)
            }
        },
        Command::Serve { config } => {
            let _log = telemetry::init(
                cli.log_format,
                "info",
                Some(AccessBuffer {
                    bytes: cli.access_log_buffer as usize,
                    flush: cli.access_log_flush,
                }),
            );
            let workers = match workers_from_env() {
                Ok(w) => w,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
            };
            let cfg = match tollgate::config::load_file(&config) {
                Ok(c) if !c.has_server => {
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
                    .and_then(|rt| rt.block_on(tollgate::demo::run()).map_err(Into::into)),
            )
        }
        Command::Reload { config } => reload(&config),
        Command::ShadowReport(args) => tollgate::server::shadow_report(args),
        Command::Simulate(args) => report(simulate(args)),
        Command::Replay(args) => tollgate::replay::cli(args),
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

/// `--access-log-flush`: a duration above zero (a zero interval would spin its thread).
fn flush_interval(s: &str) -> Result<Duration, String> {
    match humantime::parse_duration(s) {
        Ok(d) if d.is_zero() => Err("must be more than 0".into()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

async fn serve(cfg: tollgate::config::Config, workers: Option<usize>) -> anyhow::Result<()> {
    // Signal handlers first: a SIGHUP during startup must not kill the process.
    let (stop, hangups) = tollgate::shutdown::signal();
    let mut server = tollgate::server::Server::bind(cfg)
        .await
        .context("starting tollgate")?
        .reload_on(hangups);
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
            ExitCode::SUCCESS
        }
        Ok((status, body)) => {
            eprint!("reload refused ({status}): {body}");
            ExitCode::FAILURE
        }
        Err(e) => report(Err(e)),
    }
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
