//! Step 4's reading of a `multipart/form-data` body for `form:NAME` keys: its text fields,
//! split and named as every common backend splits and names them, or refused (400).
//!
//! Backends read the same bytes apart (Werkzeug 3.1's `sansio/multipart.py` and
//! `parse_options_header`, Django's `MultiPartParser`, busboy under Express, Go's
//! `mime/multipart`, a servlet container under Spring, PHP). An attacker who finds a part
//! one of them reads as `username` and tollgate does not sends it beside a `username` part
//! holding a decoy, and every attempt on one account is a fresh budget. So the body is
//! read only in the shape they all read alike, per ambiguity:
//!
//! - **Where parts begin.** Werkzeug and Python's `email` end a line at a bare LF or CR too,
//!   so `\n--B` starts a part for them and is data to multer, busboy and Go (which switches
//!   to LF lines only when the first delimiter ends so); Django ends a part at `--B`
//!   anywhere, even mid-line; Werkzeug takes `--B  ` and `--B\n` as delimiters (Go the
//!   first, and the second on the first line), multer refuses them; Go and Werkzeug read
//!   `\r\n--BX` as data. Refused unless every `--B` in the body starts a CRLF line and is
//!   followed by CRLF or by `--` (the close, then nothing or CRLF, and no `--B` after it).
//! - **Where a part's headers end.** Werkzeug ends them at the first `\r\n\r\n`, `\r\r` or
//!   `\n\n` and unfolds a line that starts with a space (so does the servlet containers'
//!   commons-fileupload); multer and Go end them at `\r\n\r\n` (httparse, textproto).
//!   Refused: a bare CR or LF, a control or a folded line in a part's headers, a part with
//!   none, a header name twice (Werkzeug, Go and commons-fileupload read the first
//!   `Content-Disposition`, multer the last), and a delimiter right after the blank line (an
//!   empty value without its CRLF: Werkzeug reads an empty field, multer and Go read the
//!   next part as its value).
//! - **The part's name** (`Content-Disposition`, exactly one, read by `media::parameters`,
//!   the Content-Type's grammar): `name=username/` is `username` to Werkzeug (a token ends
//!   at the first non-token character) and `username/` to Django; `filename ="x"` and
//!   `filename= "x"` are skipped by Werkzeug (a field) and read by Go and Django (a file);
//!   `name*=`, `name*0=` (RFC 2231) are decoded by Werkzeug and Go only; a quoted `\"` or
//!   `%22` is a `"` to Werkzeug and not to others. All refused, as is a type other than
//!   `form-data` (Werkzeug ignores the type) and a parameter given twice (PHP takes the
//!   last, Go refuses). A part is a file when its `filename` is not empty (Go and Django
//!   read `filename=""` as a field, Werkzeug as a file): file parts are never a key.
//! - **The field's value.** A `Content-Transfer-Encoding` other than `7bit`, `8bit` or
//!   `binary` (Django decodes `base64`, the others do not) and a part `charset` other than
//!   UTF-8 (Werkzeug decodes `iso-8859-1`, busboy `latin1`, `utf-16le` and `base64`) are
//!   refused. (busboy also takes a part without `filename` but with `Content-Type:
//!   application/octet-stream` as a file: tollgate keys it as a field, which can only
//!   spend a budget the backend would not, never give one.)
//!
//! multer then splits the body (the shape above leaves it no other split) and the part
//! headers are read here, strictly, not by multer's lenient `Content-Disposition` reading
//! (the first `name` substring, `filename` anywhere, case-sensitive names).

use bytes::Bytes;
use http::HeaderMap;
use memchr::memmem;

use super::media::parameters;
use crate::respond::GatewayError;

/// A `multipart/form-data` body's text fields, in order (file parts left out).
pub(super) async fn fields(
    bytes: Bytes,
    boundary: String,
) -> Result<Vec<(String, Vec<u8>)>, GatewayError> {
    let bad = |why: String| GatewayError::BadRequest(format!("the multipart body: {why}"));
    framed(&bytes, &boundary).map_err(|why| bad(why.into()))?;
    let stream =
        futures_util::stream::once(async move { Ok::<_, std::convert::Infallible>(bytes) });
    let mut parts = multer::Multipart::new(stream, boundary);
    let mut fields = Vec::new();
    while let Some(field) = parts.next_field().await.map_err(|e| bad(e.to_string()))? {
        let Some(name) = part_name(field.headers()).map_err(|why| bad(why.into()))? else {
            continue;
        };
        let value = field.bytes().await.map_err(|e| bad(e.to_string()))?;
        fields.push((name, value.to_vec()));
    }
    Ok(fields)
}

/// `Ok` when every parser splits `body` on `boundary` into the same parts with the same
/// headers (module docs, the first three points).
fn framed(body: &[u8], boundary: &str) -> Result<(), &'static str> {
    let dash = format!("--{boundary}");
    let dash = dash.as_bytes();
    let finder = memmem::Finder::new(dash);
    let next = |from: usize| finder.find(&body[from..]).map(|i| from + i);
    let mut at = next(0).ok_or("no boundary")?;
    loop {
        if at != 0 && !body[..at].ends_with(b"\r\n") {
            return Err(
                "a boundary that does not start a CRLF line (parsers that end lines at a bare LF or CR split there, others do not)",
            );
        }
        let after = &body[at + dash.len()..];
        if let Some(epilogue) = after.strip_prefix(b"--") {
            if !(epilogue.is_empty() || epilogue.starts_with(b"\r\n")) {
                return Err("text after the closing boundary on its line");
            }
            return match next(at + 1) {
                Some(_) => Err("the boundary after the closing boundary"),
                None => Ok(()),
            };
        }
        if !after.starts_with(b"\r\n") {
            return Err("a boundary line holding more than the boundary and CRLF");
        }
        let start = at + dash.len() + 2;
        let blank = memmem::find(&body[start..], b"\r\n\r\n").ok_or("a part without headers")?;
        headers_read_alike(&body[start..start + blank])?;
        let data = start + blank + 4;
        at = next(start).ok_or("no closing boundary")?;
        if at < data {
            return Err("a boundary inside a part's headers");
        }
        if at == data {
            return Err("a part's value ends without its CRLF");
        }
    }
}

/// A part's header lines: CRLF between them, no other control, none folded, at least one,
/// no name twice. Checked here on the bytes: multer keeps the last of two lines of one name
/// where Werkzeug and Go read the first.
fn headers_read_alike(block: &[u8]) -> Result<(), &'static str> {
    let lines = memmem::find_iter(block, b"\r\n")
        .chain([block.len()])
        .scan(0, |from, end| {
            let line = &block[*from..end];
            *from = end + 2;
            Some(line)
        });
    let mut names: Vec<Vec<u8>> = Vec::new();
    for line in lines {
        match line.first() {
            None => return Err("a part without headers"),
            Some(b' ' | b'\t') => return Err("a folded header line in a part"),
            Some(_) => {}
        }
        if line.iter().any(|&b| (b < b' ' && b != b'\t') || b == 0x7f) {
            return Err("a bare CR or LF, or a control, in a part's headers");
        }
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let name = name.trim_ascii().to_ascii_lowercase();
        if names.contains(&name) {
            return Err("a part with a header twice");
        }
        names.push(name);
    }
    Ok(())
}

/// A part's name, `None` for a file part (module docs, the last two points).
fn part_name(headers: &HeaderMap) -> Result<Option<String>, &'static str> {
    // Each name is on one line (`headers_read_alike`).
    let line = headers
        .get("content-disposition")
        .ok_or("each part needs a Content-Disposition")?;
    let text = std::str::from_utf8(line.as_bytes()).map_err(|_| "a part's header is not UTF-8")?;
    let unclear = "a part's Content-Disposition is not `form-data; name=\"…\"` read one way";
    let (kind, rest) = text.split_once(';').unwrap_or((text, ""));
    if !kind
        .trim_matches([' ', '\t'])
        .eq_ignore_ascii_case("form-data")
    {
        return Err(unclear);
    }
    let params = parameters(rest).map_err(|_| unclear)?;
    let param = |want: &str| params.iter().find(|(n, _)| n == want).map(|(_, v)| v);
    if param("filename").is_some_and(|f| !f.is_empty()) {
        return Ok(None);
    }
    let name = param("name").cloned().unwrap_or_default();
    if name.contains("%22") {
        return Err(unclear);
    }
    if let Some(coding) = headers.get("content-transfer-encoding") {
        let plain = ["7bit", "8bit", "binary"];
        if !plain
            .iter()
            .any(|p| coding.as_bytes().eq_ignore_ascii_case(p.as_bytes()))
        {
            return Err("a field part with a Content-Transfer-Encoding (Django decodes base64)");
        }
    }
    if let Some(media) = headers.get("content-type") {
        let text = media
            .to_str()
            .map_err(|_| "a part's Content-Type is not ASCII")?;
        let (_, rest) = text.split_once(';').unwrap_or((text, ""));
        let params = parameters(rest).map_err(|_| "a part's Content-Type is read apart")?;
        let charset = params.iter().find(|(n, _)| n == "charset");
        if charset.is_some_and(|(_, c)| !c.eq_ignore_ascii_case("utf-8")) {
            return Err("a field part's charset must be UTF-8");
        }
    }
    Ok(Some(name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: &str) -> Result<Vec<(String, String)>, String> {
        let run = fields(Bytes::from(body.to_owned()), "B".into());
        let got = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(run)
            .map_err(|e| e.to_string())?;
        Ok(got
            .into_iter()
            .map(|(n, v)| (n, String::from_utf8(v).unwrap()))
            .collect())
    }

    const CD: &str = "Content-Disposition: form-data; ";

    #[test]
    fn plain_parts_are_read() {
        let body = format!(
            "pre\r\n--B\r\n{CD}name=\"username\"\r\n\r\nalice\r\n--B\r\n{CD}name=pw\r\nContent-Type: text/plain; charset=UTF-8\r\n\r\na\nb\rc\r\n\r\n--B\r\n{CD}name=\"f\"; filename=\"a.txt\"\r\nContent-Transfer-Encoding: base64\r\n\r\nx\n-- B\r\n--B\r\n{CD}name=\"e\"\r\n\r\n\r\n--B--\r\nepilogue"
        );
        assert_eq!(
            read(&body).unwrap(),
            [
                ("username".into(), "alice".into()),
                ("pw".into(), "a\nb\rc\r\n".into()),
                ("e".into(), String::new())
            ]
        );
    }

    #[test]
    fn parts_read_apart_are_refused() {
        let part = |cd: &str| format!("--B\r\n{CD}{cd}\r\n\r\nv\r\n--B--\r\n");
        for refused in [
            part("name=username/"),
            part("name=\"username\"; filename =\"x\""),
            part("name=\"username\"; filename= \"x\""),
            part("name=\"user%22\""),
            part("name=\"username\"; name*=UTF-8''x"),
            part("name*0=user; name*1=name"),
            "--B\r\nContent-Disposition: attachment; name=\"u\"\r\n\r\nv\r\n--B--".into(),
            format!("--B\r\n{CD}name=a\r\n\r\nv\n--B\r\n{CD}name=b\r\n\r\nw\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r--B\r\n{CD}name=b\r\n\r\nw\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r\n--B \r\n{CD}name=b\r\n\r\nw\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r\n--Bx\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\n--B\r\n{CD}name=b\r\n\r\nw\r\n--B--"),
            format!("--B\r\n{CD}name=a\n\n\r\n\r\nv\r\n--B--"),
            format!("--B\r\n{CD}\r\n name=a\r\n\r\nv\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r\n--B--\r\n--B\r\n{CD}name=b\r\n\r\nw"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r\n--B--x"),
            format!("--B\r\n{CD}name=a\r\nContent-Transfer-Encoding: base64\r\n\r\ndg==\r\n--B--"),
            format!(
                "--B\r\n{CD}name=a\r\nContent-Type: text/plain; charset=latin1\r\n\r\nv\r\n--B--"
            ),
            format!("--B\r\n{CD}name=a\r\n{CD}name=b\r\n\r\nv\r\n--B--"),
            format!("--B\r\n{CD}name=a\r\n\r\nv\r\n"),
            format!("x--B\r\n{CD}name=a\r\n\r\nv\r\n--B--"),
        ] {
            assert!(read(&refused).is_err(), "{}", refused.escape_debug());
        }
    }
}
