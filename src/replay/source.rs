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
        })
    }

    /// The next line into `buf` (cleared first, newline removed); `false` at the end.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> Result<bool, ReplayError> {
        buf.clear();
        let n = self
            .reader
            .read_until(b'\n', buf)
            .map_err(|source| ReplayError::Read {
                file: self.name.clone(),
                source,
            })?;
        if buf.last() == Some(&b'\n') {
            buf.pop();
        }
        Ok(n > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines(mut input: Input) -> Vec<String> {
        let mut buf = Vec::new();
        let mut out = Vec::new();
        while input.next_line(&mut buf).unwrap() {
            out.push(String::from_utf8(buf.clone()).unwrap());
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
    fn a_corrupt_gzip_stream_is_an_error_naming_the_file() {
        let mut bad = GZIP_MAGIC.to_vec();
        bad.extend_from_slice(b"not deflate at all");
        let mut input = Input::from_reader("broken.gz".into(), io::Cursor::new(bad)).unwrap();
        let err = input.next_line(&mut Vec::new()).unwrap_err();
        assert!(err.to_string().contains("broken.gz"), "{err}");
    }
}
