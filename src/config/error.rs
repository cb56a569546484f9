//! Config errors: what a user sees when their file is wrong, so each names file, key and fault.

use std::fmt;
use std::path::PathBuf;

/// One thing wrong with a config, at one key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Dotted key path as the user wrote it, e.g. `routes[1].upstream`.
    pub key: String,
    /// What is wrong, in words that suggest the fix.
    pub message: String,
}

impl Problem {
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            key: key.into(),
            message: message.into(),
        }
    }
}

/// Why a config could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file itself could not be read.
    #[error("{file}: cannot read: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax, unknown keys or wrong types; serde stops at the first of these.
    #[error("{file}: {key}: {message}")]
    Parse {
        file: PathBuf,
        key: String,
        message: String,
    },
    /// The file parsed but makes no sense; every problem found is listed.
    #[error("{}", ProblemList { file, problems })]
    Invalid {
        file: PathBuf,
        problems: Vec<Problem>,
    },
}

impl ConfigError {
    /// Every problem as `(key, message)`, whichever variant this is; tests and `check` use it.
    pub fn problems(&self) -> Vec<Problem> {
        match self {
            ConfigError::Read { source, .. } => vec![Problem::new("", source.to_string())],
            ConfigError::Parse { key, message, .. } => vec![Problem::new(key, message)],
            ConfigError::Invalid { problems, .. } => problems.clone(),
        }
    }
}

struct ProblemList<'a> {
    file: &'a PathBuf,
    problems: &'a [Problem],
}

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}: {}: {}", self.file.display(), p.key, p.message)?;
        }
        Ok(())
    }
}
