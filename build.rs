//! Build script: records which compiler built the binary, for `tollgate_build_info{rustc}`
//! (`src/admin/build_info.rs`): an operator comparing two gateways' behaviour, or reading a
//! bug report, wants the toolchain as well as the version.

use std::process::Command;

fn main() {
    // Cargo rebuilds everything, build scripts too, when the toolchain changes.
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        // "rustc 1.95.0 (hash date)": the number alone.
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=TOLLGATE_RUSTC_VERSION={version}");
}
