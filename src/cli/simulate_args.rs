//! `tollgate simulate`: its options and their checks, before the library's simulator runs
//! (`tollgate::cli::simulate`). Part of the binary, not the library: argument parsing and
//! `anyhow` errors are the command line's (`main.rs` stays a dispatcher).

use std::path::PathBuf;

use anyhow::Context;

/// `tollgate simulate` options; the defaults are the design document's experiment.
#[derive(clap::Args)]
pub struct SimulateArgs {
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

pub fn simulate(a: SimulateArgs) -> anyhow::Result<()> {
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
        (None, None) => tollgate::cli::simulate::trace::SEED_WEIGHTS.to_vec(),
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
    let options = tollgate::cli::simulate::Options {
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
        let m = tollgate::cli::simulate::matrix::run(&options);
        if a.json {
            println!("{}", serde_json::to_string_pretty(&m)?);
        } else {
            print!("{m}");
        }
        return Ok(());
    }
    let report = tollgate::cli::simulate::run(&options);
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
fn plot(report: &tollgate::cli::simulate::Report, path: &std::path::Path) -> anyhow::Result<()> {
    Ok(tollgate::cli::simulate::svg(report, path)?)
}

#[cfg(not(feature = "plot"))]
fn plot(_: &tollgate::cli::simulate::Report, _: &std::path::Path) -> anyhow::Result<()> {
    anyhow::bail!("--plot needs tollgate built with the `plot` feature (on by default)")
}
