//! The reverse proxy itself, over real sockets: HTTP/1.1, HTTP/2 and gRPC through the
//! gateway, bodies and upgrades (a client's broken body never counted against its
//! upstream), connection bounds and stalled clients, TLS on both sides,
//! upstream choice, pooling and health checks, route matching and the canonical request
//! (with the path normalizer's property tests).

#[path = "../common/mod.rs"]
mod common;

mod backends;
mod bodies_upgrades;
mod client_faults;
mod connections;
mod grpc;
mod prop_normalize;
mod proxy;
mod proxy_h1pool;
mod proxy_http10;
mod proxy_upstreams;
mod request_canonical;
mod request_id;
mod route_match;
mod send_stall;
mod tls;
mod trace;
mod upstream_health;
mod upstream_pin;
mod upstream_tls;
