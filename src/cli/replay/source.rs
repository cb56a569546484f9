//! Log files as line sources: opened up front (so an unreadable file fails before any
//! work), gzip recognised by its magic bytes rather than its name, and a count of the bytes
//! read from disk for the progress bar.

use std::cell::Cell;
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::rc::Rc;

use flate2::bufread::MultiGzDecoder;

use super::ReplayError;

/// Read buffer: large enough that the per-call cost of the reader vanishes per line.
const BUFFER: usize = 256 * 1024;

/// The two bytes every gzip member starts with (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// One log to replay.
pub struct Input {
    /// How errors and malformed lines name it.
    pub name: String,
    pub gzip: bool,
    /// Bytes on disk (0 when unknown), for the progress bar.
    pub size: u64,
    /// Bytes read from disk so far.
    pub read: Rc<Cell<u64>>,
    reader: Box<dyn BufRead>,
    /// Bytes of the line last returned (and its newline), consumed at the next call.
    pending: usize,
}

/// Counts the bytes passing through.
struct Counted<R> {
    inner: R,
    read: Rc<Cell<u64>>,
}

impl<R: Read> Read for Counted<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.read.set(self.read.get() + n as u64);
        Ok(n)
    }
}

impl Input {
    /// Open `path`; an error names the file.
    pub fn open(path: &Path) -> Result<Input, ReplayError> {
        let name = path.display().to_string();
        let fail = |source: io::Error| ReplayError::Read {
            file: name.clone(),
            source,
        };
        let file = File::open(path).map_err(fail)?;
        let meta = file.metadata().map_err(fail)?;
        if meta.is_dir() {
            return Err(fail(io::Error::other("is a directory")));
        }
        let read = Rc::new(Cell::new(0));
        let counted = Counted {
            inner: file,
            read: read.clone(),
        };
        let mut input = Input::from_reader(name.clone(), BufReader::with_capacity(BUFFER, counted))
            .map_err(fail)?;
        input.size = meta.len();
        input.read = read;
        Ok(input)
    }

    /// A log from any reader (tests, benches, standard input); gzip is detected here too.
    pub fn from_reader(name: String, mut reader: impl BufRead + 'static) -> io::Result<Input> {
        let gzip = reader.fill_buf()?.starts_with(&GZIP_MAGIC);
        let reader: Box<dyn BufRead> = if gzip {
            // Multi-member: `cat a.gz b.gz` and logrotate's appends are one stream.
            Box::new(BufReader::with_capacity(
                BUFFER,
                MultiGzDecoder::new(reader),
            ))
        } else {
            Box::new(reader)
        };
        Ok(Input {
            name,
            gzip,
            size: 0,
            read: Rc::new(Cell::new(0)),
            reader,
            pending: 0,
        })
    }

    /// The next line without its newline, `None` at the end. Borrowed from the read buffer
    /// when the line lies wholly in it (nearly always): `read_until` copied every line into
    /// `buf` and searched with core's scalar `memchr`, ~390 instructions a line under
    /// callgrind against ~200 now. A line that straddles the buffer's end is gathered in
    /// `buf`.
    pub fn next_line<'s>(
        &'s mut self,
        buf: &'s mut Vec<u8>,
    ) -> Result<Option<&'s [u8]>, ReplayError> {
        let fail = |source| ReplayError::Read {
            file: self.name.clone(),
            source,
        };
        self.reader.consume(std::mem::take(&mut self.pending));
        let newline = memchr::memchr(b'\n', self.reader.fill_buf().map_err(fail)?);
        if let Some(n) = newline {
            self.pending = n + 1;
            // The same buffered bytes again: no read happens between the two calls.
            return Ok(Some(&self.reader.fill_buf().map_err(fail)?[..n]));
        }
        buf.clear();
        if self.reader.read_until(b'\n', buf).map_err(fail)? == 0 {
            return Ok(None);
        }
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        Ok(Some(buf))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(mut input: Input) -> Vec<String> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while let Some(line) = input.next_line(&mut buf).unwrap() {
            out.push(String::from_utf8(line.to_vec()).unwrap());
        }
        out
    }

    #[test]
    fn plain_and_multi_member_gzip() {
        let plain = Input::from_reader("p".into(), &b"a\nb"[..]).unwrap();
        assert!(!plain.gzip);
        assert_eq!(lines(plain), ["a", "b"]);
        let mut gz = Vec::new();
        for part in ["a\n", "b\n"] {
            let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            e.write_all(part.as_bytes()).unwrap();
            gz.extend(e.finish().unwrap());
        }
        let zipped = Input::from_reader("z".into(), io::Cursor::new(gz)).unwrap();
        assert!(zipped.gzip);
        assert_eq!(lines(zipped), ["a", "b"]);
    }

    #[test]
    fn lines_straddling_the_read_buffer_are_whole() {
        let small = io::BufReader::with_capacity(4, &b"abcdef\ngh\n\nijklmnopq"[..]);
        let input = Input::from_reader("s".into(), small).unwrap();
        assert_eq!(lines(input), ["abcdef", "gh", "", "ijklmnopq"]);
    }

    #[test]
    fn a_corrupt_gzip_stream_is_an_error_naming_the_file() {
        let mut bad = GZIP_MAGIC.to_vec();
        bad.extend_from_slice(b"not deflate at all");
        let mut input = Input::from_reader("broken.gz".into(), io::Cursor::new(bad)).unwrap();
        let err = input.next_line(&mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("broken.gz"), "{err}");
    }
}
