//! The JSON and form spellings of a username, and multipart's framing (the attacks'
//! helpers are in `mod.rs`).

use super::*;

// ---- JSON ------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_escapes_and_odd_json_make_no_fresh_key() {
    let gw = gateway("json:/username").await;
    no_third_attempt(
        &gw,
        (JSON, r#"{"username":"alice"}"#),
        &[
            (JSON, r#"{"username":"\u0061lice"}"#),
            (JSON, r#"{"\u0075sername":"alice"}"#),
            (JSON, "\u{feff}{\"username\":\"alice\"}"),
            (JSON, r#"{"username":"alice" /* c */}"#),
            (JSON, r#"{"username":"alice\u0000"}"#),
            (JSON, r#"{"username":"r1","\u0075sername":"alice"}"#),
            (JSON, r#"{"username":1e400}"#),
            (JSON, r#"{"username":18446744073709551616}"#),
            (JSON, r#"{"username":"alice","x":NaN}"#),
        ],
    )
    .await;
}

/// JavaScript reads every number as a double: `9007199254740993` is `9007199254740992` to
/// an Express backend, so whole numbers beyond 2^53 would be many gateway keys for one
/// JS number. They are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_number_javascript_cannot_hold_is_refused() {
    let gw = gateway("json:/id").await;
    for n in [
        "9007199254740993",
        "-9007199254740993",
        "12345678901234567890",
    ] {
        let body = format!(r#"{{"id":{n}}}"#);
        assert_eq!(post(gw.addrs.listen, JSON, &body).await.0, BAD, "{n}");
    }
    no_third_attempt(
        &gw,
        (JSON, r#"{"id":9007199254740991}"#),
        &[
            (JSON, r#"{"id":"9007199254740991"}"#),
            (JSON, r#"{"id":9007199254740991}"#),
        ],
    )
    .await;
    // `-0` is a float to serde_json (0 to JavaScript and Python): refused, not a key.
    let zero = post(gw.addrs.listen, JSON, r#"{"id":-0}"#).await;
    assert_eq!(zero.0, BAD, "{}", zero.1);
}

/// Go's `encoding/json` matches keys to struct fields case-insensitively (Unicode simple
/// folding: `uſername` is `username`), the last match winning; ASP.NET Core's web defaults
/// do the same. `{"username":"r1","UserName":"alice"}` is alice to them: an object key
/// that folds to the pointer's is the same key, and two of them are refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_keys_are_matched_as_case_insensitive_backends_match_them() {
    let gw = gateway("json:/user/name").await;
    no_third_attempt(
        &gw,
        (JSON, r#"{"user":{"name":"alice"}}"#),
        &[
            (JSON, r#"{"User":{"Name":"alice"}}"#),
            (JSON, r#"{"USER":{"NAME":"alice"}}"#),
            (JSON, r#"{"user":{"name":"r1","Name":"alice"}}"#),
            (JSON, r#"{"user":{"name":"r2"},"User":{"name":"alice"}}"#),
            (
                JSON,
                "{\"user\":{\"\u{212a}\":1,\"nam\u{0435}\":2,\"name\":\"alice\"}}",
            ),
        ],
    )
    .await;
    let gw = gateway("json:/username").await;
    no_third_attempt(
        &gw,
        (JSON, r#"{"username":"bob"}"#),
        &[(JSON, "{\"u\u{17f}ername\":\"bob\"}")],
    )
    .await;
}

/// Deep nesting is refused, not a stack overflow, and the gateway serves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deeply_nested_json_is_refused_and_the_gateway_lives() {
    let gw = gateway("json:/username").await;
    let deep = format!("{}{}", "[".repeat(30_000), "]".repeat(30_000));
    assert_eq!(post(gw.addrs.listen, JSON, &deep).await.0, BAD);
    let objects = format!(
        "{{\"username\":\"a\",\"x\":{}1{}}}",
        "{\"a\":".repeat(10_000),
        "}".repeat(10_000)
    );
    assert_eq!(post(gw.addrs.listen, JSON, &objects).await.0, BAD);
    assert_eq!(
        post(gw.addrs.listen, JSON, r#"{"username":"a"}"#).await.0,
        OK
    );
}

// ---- urlencoded ------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn form_spellings_make_no_fresh_key() {
    let gw = gateway("form:username").await;
    no_third_attempt(
        &gw,
        (FORM, "username=al+ice"),
        &[
            (FORM, "username=al%20ice"),
            (FORM, "username=al+ice&username="),
            (FORM, "username=&username=al+ice"),
            (FORM, "username=al+ice%00"),
            (FORM, "username=al+ice%C0%80"),
            (FORM, "username%00x=al+ice&username=r1"),
            (FORM, "USERNAME=al%20ice"),
            (FORM, "username=al+ice&username[x]=r1"),
        ],
    )
    .await;
    // A `%` not followed by two hex digits stays a `%`, as PHP, Python and Node read it:
    // `bob%` and `bob%25` are one username.
    let gw = gateway("form:username").await;
    no_third_attempt(&gw, (FORM, "username=bob%"), &[(FORM, "username=bob%25")]).await;
}

/// 64 KiB of `&` is answered at once (no username: the policy does not apply).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_of_separators_is_answered() {
    let gw = gateway("form:username").await;
    let amps = "&".repeat(64 * 1024 - 20) + "username=alice";
    assert_eq!(post(gw.addrs.listen, FORM, &amps).await.0, OK);
    assert_eq!(post(gw.addrs.listen, FORM, &amps).await.0, OK);
    assert_eq!(
        post(gw.addrs.listen, FORM, "username=alice").await.0,
        DENIED
    );
}

// ---- multipart -------------------------------------------------------------------------

fn multipart(parts: &[(&str, &str)]) -> String {
    let mut body = String::new();
    for (disposition, value) in parts {
        body.push_str(&format!(
            "--XyZ\r\nContent-Disposition: {disposition}\r\n\r\n{value}\r\n"
        ));
    }
    body.push_str("--XyZ--\r\n");
    body
}

const MULTIPART: &str = "multipart/form-data; boundary=XyZ";

/// Part names as backends read them. PHP, Werkzeug and Go read `Content-Disposition`
/// parameter names in any case (`NAME=`), take the last of two `name`s (PHP) or refuse them
/// (Go), read RFC 2231's `name*=UTF-8''username` (Werkzeug, Go), never see a `filename`
/// inside another parameter's quoted value, and read a part with `filename=""` as a
/// field (Go). The gateway read the first `name=` substring and `filename` anywhere, so a
/// second `username` part those backends read was invisible to it: a fresh key per
/// request. ASP.NET reads `UserName` as `username`, PHP `username[]` as `username`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_names_are_read_as_backends_read_them() {
    let gw = gateway("form:username").await;
    let plain = multipart(&[("form-data; name=\"username\"", "alice")]);
    let tricks: Vec<String> = [
        "form-data; NAME=\"username\"",
        "form-data; name=\"x\"; name=\"username\"",
        "form-data; name*=UTF-8''username",
        "form-data; name=\"username\"; x=\" filename=f\"",
        "form-data; name=\"username\"; filename=\"\"",
        "form-data; name=\"UserName\"",
        "form-data; name=\"username[]\"",
        "form-data; name=username",
    ]
    .iter()
    .enumerate()
    .map(|(i, d)| {
        multipart(&[
            (d, "alice"),
            ("form-data; name=\"username\"", &format!("r{i}")),
        ])
    })
    .collect();
    let spellings: Vec<(&str, &str)> = tricks.iter().map(|b| (MULTIPART, b.as_str())).collect();
    no_third_attempt(&gw, (MULTIPART, &plain), &spellings).await;
}

/// A file part named like the field beside a text part (PHP puts it in `$_FILES`, the
/// text part in `$_POST`) keys the text part; a real file part is never the username.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_part_is_not_the_username() {
    let gw = gateway("form:username").await;
    let with_file = |file: &str| {
        multipart(&[
            ("form-data; name=\"username\"; filename=\"a.txt\"", file),
            ("form-data; name=\"username\"", "alice"),
        ])
    };
    let (a, b, c) = (with_file("f1"), with_file("f2"), with_file("f3"));
    no_third_attempt(&gw, (MULTIPART, &a), &[(MULTIPART, &b), (MULTIPART, &c)]).await;
}
