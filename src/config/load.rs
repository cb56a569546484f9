//! Reading and parsing: text to [`RawConfig`], with the key path of the first serde error.

use std::path::{Path, PathBuf};

use super::raw::RawConfig;
use super::{Config, ConfigError, validate};

/// Read, parse and validate the file at `path`.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.to_path_buf(),
        source,
    })?;
    let raw = parse_str(&text, path)?;
    validate(raw, path)
}

/// Parse TOML text into the raw structs; `origin` only names the file in errors.
pub fn parse_str(text: &str, origin: &Path) -> Result<RawConfig, ConfigError> {
    let parse_error = |key: String, err: toml::de::Error| ConfigError::Parse {
        file: origin.to_path_buf(),
        key,
        message: describe(text, &err),
    };
    let de = toml::Deserializer::parse(text).map_err(|e| parse_error("(syntax)".into(), e))?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let key = if key == "." {
            "(top level)".into()
        } else {
            key
        };
        parse_error(key, e.into_inner())
    })
}

/// toml's message plus the line it points at, without dumping the file (which may hold secrets).
fn describe(text: &str, err: &toml::de::Error) -> String {
    let message = err.message().trim().to_string();
    match err.span() {
        Some(span) => {
            let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
            format!("{message} (line {line})")
        }
        None => message,
    }
}

/// Resolve a path from the config relative to the config file's folder.
pub(super) fn relative_to(origin: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        return p.to_path_buf();
    }
    match origin.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join(p),
        _ => p.to_path_buf(),
    }
}
