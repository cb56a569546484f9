//! Headless Chromium for the dashboard tests: the page as a browser renders it (its script
//! run, its fetches answered), read back as the DOM it built, or drawn as a PNG.
//! scripts/test.sh installs Debian's `chromium`; a test that needs it fails without it.
#![allow(dead_code)]

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// Where Debian puts the browser (`need chromium chromium` in scripts/test.sh).
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// Virtual time the page gets before its DOM is read: its first refresh (every fetch
/// answered: virtual time waits for the network) and one timed refresh after it.
const BUDGET_MS: u32 = 6000;

/// Run Chromium headless on `url` with `args` in a fresh profile; its stdout. It runs on
/// a blocking thread, so the gateway the page asks keeps serving on the test's runtime.
async fn run(url: &str, args: &[String]) -> String {
    assert!(
        Path::new(CHROMIUM).exists(),
        "{CHROMIUM} is missing: scripts/test.sh installs it (apt-get install chromium)"
    );
    let (url, args) = (url.to_string(), args.to_vec());
    tokio::task::spawn_blocking(move || run_blocking(&url, &args))
        .await
        .expect("the chromium thread")
}

fn run_blocking(url: &str, args: &[String]) -> String {
    let profile = tempdir();
    let stdout = profile.with_extension("out");
    let mut child = std::process::Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--virtual-time-budget={BUDGET_MS}"))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = std::fs::read_to_string(&stdout).unwrap_or_default();
    let _ = std::fs::remove_dir_all(&profile);
    let _ = std::fs::remove_file(&stdout);
    assert!(status.success(), "chromium failed: {status:?}");
    out
}

/// The DOM of `url` once its scripts have run.
pub async fn dump_dom(url: &str) -> String {
    run(url, &["--dump-dom".to_string()]).await
}

/// A `width`×`height` screenshot of `url` once its scripts have run, written to `png`.
pub async fn screenshot(url: &str, png: &Path, width: u32, height: u32) {
    let _ = std::fs::remove_file(png);
    run(
        url,
        &[
            format!("--screenshot={}", png.display()),
            format!("--window-size={width},{height}"),
        ],
    )
    .await;
    let bytes = std::fs::read(png).expect("chromium wrote the screenshot");
    assert!(
        bytes.starts_with(b"\x89PNG"),
        "{} is not a PNG",
        png.display()
    );
}

/// A fresh directory of its own (a profile Chromium has never seen).
fn tempdir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    let dir = std::env::temp_dir().join(format!(
        "tollgate-chromium-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The attributes of every element opening with `open` (e.g. `<tr data-key=`), in document
/// order, as (name, value) pairs, entities of `&amp;`, `&quot;`, `&lt;`, `&gt;` decoded.
pub fn elements(dom: &str, open: &str) -> Vec<Vec<(String, String)>> {
    dom.match_indices(open)
        .map(|(at, _)| {
            let tag = &dom[at + 1..];
            let tag = &tag[..tag.find('>').unwrap_or(tag.len())];
            attributes(tag)
        })
        .collect()
}

fn attributes(tag: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = tag.split_once(' ').map_or("", |(_, r)| r);
    while let Some((name, after)) = rest.split_once("=\"") {
        let Some((value, tail)) = after.split_once('"') else {
            break;
        };
        let value = value
            .replace("&quot;", "\"")
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&amp;", "&");
        out.push((name.trim().to_string(), value));
        rest = tail;
    }
    out
}

/// The value of attribute `name` among `attrs`.
pub fn attr<'a>(attrs: &'a [(String, String)], name: &str) -> Option<&'a str> {
    attrs
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.as_str())
}
