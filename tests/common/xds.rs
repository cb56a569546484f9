//! The Python that speaks Envoy's own protos: a virtual environment with PyPI's `xds-protos`
//! (the protos Envoy publishes, compiled) and `grpcio`, kept apart from the system Python
//! because `xds-protos` ships `opentelemetry.proto` modules that shadow `opentelemetry-proto`'s
//! and would break the OTLP receiver of the tracing tests (`otlp_receiver.py`).
//! `scripts/test.sh` makes it at `target/venv/xds`; `TOLLGATE_XDS_PYTHON` names another.

use std::path::PathBuf;

/// The interpreter of the xds-protos environment; panics with how to make it when absent.
pub fn python() -> PathBuf {
    let path = std::env::var_os("TOLLGATE_XDS_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| super::repo_path("target/venv/xds/bin/python"));
    assert!(
        path.exists(),
        "{} is missing: run scripts/test.sh, which makes the xds-protos virtual environment \
         (or set TOLLGATE_XDS_PYTHON to a Python with xds-protos and grpcio)",
        path.display()
    );
    path
}
