//! The reverse proxy over real sockets: HTTP/1.1 and HTTP/2 clients, real upstreams.

use std::time::Duration;

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::channel::Channel;
use http_body_util::{BodyExt, Empty};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_http1_and_rewrites_headers() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let req = Request::get("/items?x=1")
        .header("host", "shop.example")
        .header("connection", "keep-alive, x-private")
        .header("x-private", "secret")
        .header("keep-alive", "timeout=5")
        .header("x-forwarded-for", "6.6.6.6")
        .header("x-real-ip", "6.6.6.6")
        .header("x-custom", "kept")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = send_h1(gw.addrs.listen, req).await;
    assert_eq!(resp.status(), StatusCode::OK);
    let via = resp.headers()["via"].to_str().unwrap().to_owned();
    assert!(
        via.starts_with("1.1 tollgate-"),
        "a pseudonym, not the host: {via}"
    );
    let echo = json(resp).await;
    let h = &echo["headers"];
    assert_eq!(echo["uri"], "/items?x=1");
    assert_eq!(h["host"], "shop.example", "Host is preserved");
    assert_eq!(h["x-custom"], "kept");
    assert!(
        h.get("x-private").is_none(),
        "header named in Connection is dropped"
    );
    assert!(h.get("keep-alive").is_none());
    assert_eq!(
        h["x-forwarded-for"], "127.0.0.1",
        "an untrusted peer's XFF is replaced by this hop"
    );
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["forwarded"], "for=127.0.0.1;proto=http");
    assert_eq!(h["via"], via.as_str(), "the same pseudonym both ways");
    // No trusted proxies: the claimed XFF is ignored, the peer is the client.
    assert_eq!(h["x-real-ip"], "127.0.0.1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwards_h2c_prior_knowledge() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let resp = send_h2(gw.addrs.listen, get(&gw.url("/h2"))).await;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let via = resp.headers()["via"].to_str().unwrap().to_owned();
    assert!(via.starts_with("2 tollgate-"), "{via}");
    let echo = json(resp).await;
    assert_eq!(echo["uri"], "/h2");
    // The upstream speaks HTTP/1.1 and gets the :authority as Host.
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(echo["headers"]["host"], gw.addrs.listen.to_string());
    assert_eq!(echo["headers"]["via"], via.as_str());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trusted_proxy_xff_rules() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(
        up,
        "",
        "[client_ip]\ntrusted_proxies = [\"127.0.0.1/32\", \"10.0.0.0/8\"]\n",
    ))
    .await;
    let real_ip = |xff: &'static str| {
        let url = gw.url("/");
        async move {
            let req = Request::get(url)
                .header("x-forwarded-for", xff)
                .body(Empty::<Bytes>::new())
                .unwrap();
            json(send_h1(gw.addrs.listen, req).await).await["headers"]["x-real-ip"].clone()
        }
    };
    assert_eq!(
        real_ip("9.9.9.9, 1.2.3.4, 10.1.1.1").await,
        "1.2.3.4",
        "right-most untrusted hop"
    );
    assert_eq!(
        real_ip("garbage, 1.2.3.4").await,
        "1.2.3.4",
        "garbage left of the client does not discard it"
    );
    assert_eq!(
        real_ip("::ffff:5.6.7.8").await,
        "5.6.7.8",
        "mapped IPv6 is IPv4"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_route_is_404_json() {
    let up = echo_upstream().await;
    let text = format!(
        "[server]\nlisten=\"127.0.0.1:0\"\n[upstreams.app]\nurls=[\"http://{up}\"]\n\
         [[routes]]\nname=\"api\"\nmatch={{path_prefix=\"/api\", methods=[\"GET\"]}}\nupstream=\"app\"\nstrip_prefix=true\n"
    );
    let gw = Gateway::start(&text).await;
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/other"))).await;
    assert_eq!(resp.status(), StatusCode::NOT_FOUND);
    assert_eq!(resp.headers()["content-type"], "application/problem+json");
    let body = json(resp).await;
    assert_eq!(body["status"], 404);
    // Wrong method on a matching prefix is no match either.
    let post = Request::post(gw.url("/api/x"))
        .body(Empty::<Bytes>::new())
        .unwrap();
    assert_eq!(
        send_h1(gw.addrs.listen, post).await.status(),
        StatusCode::NOT_FOUND
    );
    // strip_prefix removes the prefix.
    let echo = json(send_h1(gw.addrs.listen, get(&gw.url("/api/v1/x?q"))).await).await;
    assert_eq!(echo["uri"], "/v1/x?q");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_upstream_is_504_not_a_hang() {
    // The upstream holds every request until the test ends.
    let (_hold, held) = tokio::sync::watch::channel(());
    let up = upstream(move |_req| {
        let mut held = held.clone();
        async move {
            let _ = held.changed().await;
            Response::new(body("late"))
        }
    })
    .await;
    let gw = Gateway::start(&config(up, "upstream_timeout = \"200ms\"", "")).await;
    let resp = tokio::time::timeout(
        Duration::from_secs(10),
        send_h1(gw.addrs.listen, get(&gw.url("/"))),
    )
    .await
    .expect("gateway answers instead of hanging");
    assert_eq!(resp.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(json(resp).await["status"], 504);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn huge_request_head_is_431() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(up, "max_header_bytes = 8192", "")).await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    let big = "a".repeat(20_000);
    let head = format!("GET / HTTP/1.1\r\nhost: x\r\nx-big: {big}\r\n\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 431"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_header_client_is_cut_off() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(up, "header_timeout = \"300ms\"", "")).await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap();
    // Never finish the head: the gateway must close the connection by itself.
    let mut buf = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut buf)).await;
    assert!(
        read.is_ok(),
        "connection still open long after header_timeout"
    );
    let text = String::from_utf8_lossy(&buf);
    assert!(!text.contains("200 OK"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_stream_both_ways() {
    // Upstream: reports the first upload chunk as soon as it arrives, then counts the rest;
    // for downloads it sends one chunk, waits for the test's go, then 100 MB more.
    let (first_tx, mut first_rx) = mpsc::channel::<usize>(1);
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let up = upstream(move |req: Request<hyper::body::Incoming>| {
        let first_tx = first_tx.clone();
        let mut go_rx = go_rx.clone();
        async move {
            if req.method() == http::Method::POST {
                let mut body = req.into_body();
                let mut total = 0usize;
                while let Some(frame) = body.frame().await {
                    let n = frame.unwrap().data_ref().map_or(0, |d| d.len());
                    if total == 0 {
                        let _ = first_tx.send(n).await;
                    }
                    total += n;
                }
                return Response::new(crate::common::body(total.to_string()));
            }
            let (mut tx, channel) =
                Channel::<Bytes, Box<dyn std::error::Error + Send + Sync>>::new(4);
            tokio::spawn(async move {
                let _ = tx.send_data(Bytes::from_static(b"first")).await;
                let _ = go_rx.wait_for(|go| *go).await;
                let chunk = Bytes::from(vec![7u8; 1 << 20]);
                for _ in 0..100 {
                    if tx.send_data(chunk.clone()).await.is_err() {
                        return;
                    }
                }
            });
            Response::new(channel.boxed())
        }
    })
    .await;
    let gw = Gateway::start(&config(up, "", "")).await;

    // Upload: the upstream sees the first chunk before the client has sent the second.
    let (mut tx, channel) = Channel::<Bytes>::new(2);
    let req = Request::post(gw.url("/upload")).body(channel).unwrap();
    let sending = tokio::spawn(send_h1(gw.addrs.listen, req));
    let chunk = Bytes::from(vec![1u8; 1 << 20]);
    tx.send_data(chunk.clone()).await.unwrap();
    assert!(
        first_rx.recv().await.unwrap() > 0,
        "first chunk reached the upstream while the upload is open"
    );
    for _ in 1..100 {
        tx.send_data(chunk.clone()).await.unwrap();
    }
    drop(tx);
    let resp = sending.await.unwrap();
    assert_eq!(text(resp).await, (100usize << 20).to_string());

    // Download: the first chunk arrives before the upstream is allowed to send the rest.
    let resp = send_h1(gw.addrs.listen, get(&gw.url("/download"))).await;
    let mut body = resp.into_body();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(&first[..], b"first");
    go_tx.send(true).unwrap();
    let mut total = 0;
    while let Some(frame) = body.frame().await {
        total += frame.unwrap().into_data().map_or(0, |d| d.len());
    }
    assert_eq!(total, 100 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_upgrade_is_tunnelled() {
    let up = upstream(|mut req: Request<hyper::body::Incoming>| async move {
        let on_upgrade = hyper::upgrade::on(&mut req);
        tokio::spawn(async move {
            let upgraded = on_upgrade.await.unwrap();
            let mut io = hyper_util::rt::TokioIo::new(upgraded);
            let mut buf = [0u8; 5];
            io.read_exact(&mut buf).await.unwrap();
            buf.reverse();
            io.write_all(&buf).await.unwrap();
        });
        Response::builder()
            .status(StatusCode::SWITCHING_PROTOCOLS)
            .header("connection", "upgrade")
            .header("upgrade", "websocket")
            .body(body(""))
            .unwrap()
    })
    .await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let mut s = TcpStream::connect(gw.addrs.listen).await.unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nhost: x\r\nconnection: upgrade\r\nupgrade: websocket\r\n\r\n",
    )
    .await
    .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await.unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8_lossy(&head).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"), "{head}");
    s.write_all(b"hello").await.unwrap();
    let mut back = [0u8; 5];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"olleh");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_endpoints_and_metrics() {
    let up = echo_upstream().await;
    let gw = Gateway::start(&config(up, "", "")).await;
    let admin = gw.addrs.admin_listen.unwrap();
    assert_eq!(
        send_h1(gw.addrs.listen, get(&gw.url("/"))).await.status(),
        StatusCode::OK
    );
    let health = send_h1(admin, get(&format!("http://{admin}/healthz"))).await;
    assert_eq!(health.status(), StatusCode::OK);
    let ready = send_h1(admin, get(&format!("http://{admin}/readyz"))).await;
    assert_eq!(ready.status(), StatusCode::OK);
    let metrics = text(send_h1(admin, get(&format!("http://{admin}/metrics"))).await).await;
    assert!(
        metrics.contains("tollgate_requests_total{route=\"api\",status=\"200\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics
            .contains("tollgate_upstream_duration_seconds_count{route=\"api\",upstream=\"app\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("tollgate_request_duration_seconds_bucket"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_shutdown_finishes_in_flight_request() {
    let (release_tx, release_rx) = tokio::sync::watch::channel(false);
    let (arrived_tx, mut arrived_rx) = mpsc::channel::<()>(1);
    let up = upstream(move |_req| {
        let mut release_rx = release_rx.clone();
        let arrived_tx = arrived_tx.clone();
        async move {
            let _ = arrived_tx.send(()).await;
            let _ = release_rx.wait_for(|r| *r).await;
            Response::new(body("finished"))
        }
    })
    .await;
    let mut gw = Gateway::start(&config(up, "shutdown_grace = \"10s\"", "")).await;
    let addr = gw.addrs.listen;
    let in_flight = tokio::spawn(send_h1(addr, get(&format!("http://{addr}/slow"))));
    arrived_rx.recv().await.unwrap();
    let stopped = gw.shutdown();
    // New connections are refused once the listener is gone.
    let mut refused = false;
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(refused, "listener still accepting after shutdown");
    assert!(
        !stopped.is_finished(),
        "server stopped while a request was in flight"
    );
    release_tx.send(true).unwrap();
    let resp = in_flight.await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(text(resp).await, "finished");
    tokio::time::timeout(Duration::from_secs(10), stopped)
        .await
        .unwrap()
        .unwrap();
}
