//! The `tollgate` command line: a thin shell over the library (see `lib.rs` for the map).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use tollgate::telemetry::{self, LogFormat};

/// A proxy allocates and frees small buffers and header maps on every request; glibc's
/// malloc spent ~9 % of the request path's CPU on that (perf, benches/load.sh load).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(
    name = "tollgate",
    version,
    about = "HTTP reverse proxy with distributed rate limiting"
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
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve {
        /// Config file.
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
    },
    /// Validate a config: exit 0 when valid, else print every problem and exit 2.
    Check {
        #[arg(short, long, env = "TOLLGATE_CONFIG")]
        config: PathBuf,
    },
    /// Run the shipped config against a built-in sample upstream and show what happens.
    Demo,
    /// Write a self-signed development certificate for localhost.
    Certs {
        /// Folder to write localhost.pem and localhost-key.pem into.
        #[arg(long, default_value = "certs")]
        out: PathBuf,
    },
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
            telemetry::init(cli.log_format);
            let cfg = match tollgate::config::load_file(&config) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(EXIT_BAD_CONFIG);
                }
            };
            report(runtime().and_then(|rt| rt.block_on(serve(cfg))))
        }
        Command::Demo => {
            // The demo prints its own table; only warnings go to the log.
            if std::env::var_os("RUST_LOG").is_none() {
                // SAFETY: single-threaded here, before any runtime or thread exists.
                unsafe { std::env::set_var("RUST_LOG", "warn") };
            }
            telemetry::init(cli.log_format);
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build();
            report(
                rt.context("starting the async runtime")
                    .and_then(|rt| rt.block_on(tollgate::demo::run()).map_err(Into::into)),
            )
        }
        Command::Certs { out } => report(
            tollgate::certs::write(&out)
                .map(|(c, k)| println!("wrote {} and {}", c.display(), k.display()))
                .map_err(Into::into),
        ),
    }
}

async fn serve(cfg: tollgate::config::Config) -> anyhow::Result<()> {
    let server = tollgate::server::Server::bind(cfg)
        .await
        .context("starting tollgate")?;
    server.run(tollgate::server::shutdown::signal()).await;
    Ok(())
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // TOLLGATE_WORKERS pins the worker count (benchmarks use 2); default: one per core.
    let mut b = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = std::env::var("TOLLGATE_WORKERS")
        .ok()
        .and_then(|v| v.parse().ok())
    {
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
