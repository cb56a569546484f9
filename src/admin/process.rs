//! The `process_*` metrics every Prometheus exporter has (CPU, memory, file descriptors,
//! start time), read from `/proc/self` at each scrape by a [`Collector`], with the names and
//! meanings of the Go client's process collector, so the dashboards and alerts written for
//! any exporter (an fd leak nearing `process_max_fds`, a restart seen in the start time)
//! work on tollgate unchanged.
//!
//! Read by hand rather than through the `procfs` crate: six numbers from four files do not
//! need a crate that parses all of `/proc`; `rustix` (already in the tree) gives the two
//! numbers the kernel does not write there, the clock tick and the page size, without
//! `unsafe`. Where `/proc` is missing (not Linux) the metrics are left out, not faked.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// Registered once per registry; reads `/proc` only when `/metrics` is scraped.
#[derive(Debug, Default)]
pub struct ProcessCollector;

/// One scrape's reading of `/proc/self`; `None` what could not be read.
#[derive(Debug, Default, PartialEq)]
struct Reading {
    cpu_seconds: Option<f64>,
    resident_bytes: Option<f64>,
    virtual_bytes: Option<f64>,
    start_time_seconds: Option<f64>,
    open_fds: Option<f64>,
    max_fds: Option<f64>,
}

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let r = read();
        // A counter's family name has no `_total`: the encoder appends it to the sample.
        if let Some(v) = r.cpu_seconds {
            let m = ConstCounter::new(v);
            let help = "Total user and system CPU time spent in seconds";
            m.encode(encoder.encode_descriptor(
                "process_cpu_seconds",
                help,
                None,
                m.metric_type(),
            )?)?;
        }
        let gauges = [
            (
                r.resident_bytes,
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
            ),
            (
                r.virtual_bytes,
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
            ),
            (
                r.start_time_seconds,
                "process_start_time_seconds",
                "Start time of the process since unix epoch in seconds",
            ),
            (
                r.open_fds,
                "process_open_fds",
                "Number of open file descriptors",
            ),
            (
                r.max_fds,
                "process_max_fds",
                "Maximum number of open file descriptors",
            ),
        ];
        for (value, name, help) in gauges {
            if let Some(v) = value {
                let m = ConstGauge::new(v);
                m.encode(encoder.encode_descriptor(name, help, None, m.metric_type())?)?;
            }
        }
        Ok(())
    }
}

/// What `/proc/self` says now.
fn read() -> Reading {
    let file = |p: &str| std::fs::read_to_string(p).ok();
    let ticks = rustix::param::clock_ticks_per_second() as f64;
    let page = rustix::param::page_size() as f64;
    let stat = file("/proc/self/stat").and_then(|s| parse_stat(&s));
    let boot = file("/proc/stat").and_then(|s| parse_boot_time(&s));
    Reading {
        cpu_seconds: stat.map(|s| (s.utime + s.stime) as f64 / ticks),
        resident_bytes: stat.map(|s| s.rss_pages as f64 * page),
        virtual_bytes: stat.map(|s| s.vsize as f64),
        start_time_seconds: stat
            .zip(boot)
            .map(|(s, b)| b as f64 + s.starttime as f64 / ticks),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|d| d.count() as f64),
        max_fds: file("/proc/self/limits").and_then(|s| parse_max_fds(&s)),
    }
}

/// The fields of `/proc/self/stat` the metrics need (proc(5)).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Stat {
    /// Clock ticks in user and kernel mode.
    utime: u64,
    stime: u64,
    /// Clock ticks after boot the process started at.
    starttime: u64,
    /// Bytes.
    vsize: u64,
    rss_pages: u64,
}

/// The command name (field 2) is in parentheses and may hold spaces and `)`: the fields
/// are counted from after its last `)`, where field 3 (`state`) begins.
fn parse_stat(s: &str) -> Option<Stat> {
    let rest = &s[s.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // Field n of proc(5) is fields[n - 3].
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    Some(Stat {
        utime: field(14)?,
        stime: field(15)?,
        starttime: field(22)?,
        vsize: field(23)?,
        rss_pages: field(24)?,
    })
}

/// `btime`: the boot time, seconds since the epoch, that `starttime` counts from.
fn parse_boot_time(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse().ok())
}

/// The soft limit of `Max open files` (what `open` fails at); `None` when unlimited.
fn parse_max_fds(s: &str) -> Option<f64> {
    let line = s.lines().find_map(|l| l.strip_prefix("Max open files"))?;
    line.split_whitespace()
        .next()?
        .parse::<u64>()
        .ok()
        .map(|v| v as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_count_from_the_last_parenthesis() {
        let line = "4242 (to ll) gate) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    170 30 0 0 20 0 9 0 12345 1048576 256 18446744073709551615";
        let s = parse_stat(line).expect("parses");
        assert_eq!(
            s,
            Stat {
                utime: 170,
                stime: 30,
                starttime: 12345,
                vsize: 1_048_576,
                rss_pages: 256,
            }
        );
        assert_eq!(parse_stat("4242 (short) S 1 2"), None);
    }

    #[test]
    fn boot_time_and_fd_limit() {
        let stat = "cpu  1 2 3\nintr 5\nbtime 1700000000\nprocesses 9\n";
        assert_eq!(parse_boot_time(stat), Some(1_700_000_000));
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(parse_max_fds(limits), Some(1024.0));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(parse_max_fds(unlimited), None);
    }

    #[test]
    fn this_process_reads_as_alive() {
        let r = read();
        assert!(r.resident_bytes.is_some_and(|v| v > 0.0), "{r:?}");
        assert!(r.open_fds.is_some_and(|v| v > 0.0), "{r:?}");
        assert!(r.start_time_seconds.is_some_and(|v| v > 1.0e9), "{r:?}");
    }
}
