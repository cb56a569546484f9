//! `tollgate_build_info{version,rustc,profile} 1`: which build is running, as every
//! Prometheus exporter says it (a gauge of 1 whose labels carry the facts), so a rollout
//! shows in a `count by (version)` and a changed behaviour can be matched to a build.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    /// The crate's version (`Cargo.toml`).
    version: &'static str,
    /// The compiler's version (`build.rs`).
    rustc: &'static str,
    /// `release` or `debug`: whether the build has debug assertions.
    profile: &'static str,
}

/// Register `tollgate_build_info` (an Info metric: the encoder adds the `_info` suffix and
/// writes it as a gauge in the Prometheus text format).
pub fn register(registry: &mut Registry) {
    let labels = BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        rustc: env!("TOLLGATE_RUSTC_VERSION"),
        profile: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
    };
    registry.register(
        "tollgate_build",
        "The running build: crate version, compiler version and profile",
        Info::new(labels),
    );
}
