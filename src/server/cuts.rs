//! `tollgate_timeouts_total{kind}`: the connections and HTTP/2 streams the server cut because
//! a client broke one of its time bounds — slow or silent clients, whose count an operator
//! watches to tell an attack (or a bound set too tight) from quiet.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Why the server cut a connection or a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    /// No request head within `header_timeout` of the accept.
    NoHead,
    /// A later head not finished within `header_timeout` of its first byte.
    HeadUnfinished,
    /// A TLS handshake not done within `header_timeout`.
    Handshake,
    /// A response its client took nothing of for `body_timeout` (HTTP/1.1: the connection;
    /// HTTP/2: the stream).
    NotTaken,
    /// Still open `header_timeout` after a graceful close began.
    Drain,
}

impl Cut {
    /// For the debug log.
    pub fn why(self) -> &'static str {
        match self {
            Cut::NoHead => "no request head within header_timeout",
            Cut::HeadUnfinished => "request head not finished within header_timeout",
            Cut::Handshake => "TLS handshake not done within header_timeout",
            Cut::NotTaken => "response not taken by the client within body_timeout",
            Cut::Drain => "still open header_timeout after closing",
        }
    }

    /// The metric's label: which bound.
    fn kind(self) -> &'static str {
        match self {
            Cut::NoHead | Cut::HeadUnfinished | Cut::Handshake => "header",
            Cut::NotTaken => "send",
            Cut::Drain => "drain",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    kind: &'static str,
}

/// The counter family; cheap to clone (one shared family).
#[derive(Clone, Debug, Default)]
pub(crate) struct Cuts(Family<KindLabels, Counter>);

impl Cuts {
    pub fn register(registry: &mut Registry) -> Self {
        let cuts = Cuts::default();
        registry.register(
            "tollgate_timeouts",
            "Connections (and HTTP/2 streams) cut for breaking a time bound, by kind",
            cuts.0.clone(),
        );
        cuts
    }

    pub fn count(&self, cut: Cut) {
        self.0.get_or_create(&KindLabels { kind: cut.kind() }).inc();
    }
}
