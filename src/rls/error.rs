//! What is wrong with a rate limit YAML: one [`RlsError`] per problem, each naming its file,
//! line and descriptor path, gathered into [`RlsErrors`] so a load reports every problem at
//! once (envoyproxy/ratelimit stops at its first).
//!
//! The problems are the ones envoyproxy/ratelimit refuses (`src/config/config_impl.go`), in its
//! words where it has some, so a user searching its messages finds the same cause.

use std::fmt;
use std::path::PathBuf;

/// One problem in one file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RlsError {
    /// The file as it was named to the loader (a folder's file: the folder joined with its name).
    pub file: PathBuf,
    /// 1-based line of the node at fault; 0 when the problem has no single place (a file that
    /// cannot be read, a duplicate domain's second file names its `domain:` line).
    pub line: usize,
    /// Where in the file, as a YAML path with each descriptor's composite key, for example
    /// `descriptors[0](key1_value1).descriptors[1](subkey1).rate_limit.unit`; empty for the
    /// document itself.
    pub at: String,
    /// What is wrong.
    pub problem: Problem,
}

impl fmt::Display for RlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
        }
        if !self.at.is_empty() {
            write!(f, ": {}", self.at)?;
        }
        write!(f, ": {}", self.problem)
    }
}

/// The kinds of problem, worded as envoyproxy/ratelimit words them where it has a message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Problem {
    /// The file or folder could not be read.
    #[error("cannot read: {0}")]
    Read(String),
    /// Not YAML (the parser's message, with its line and column).
    #[error("error loading config file: {0}")]
    Syntax(String),
    /// The document is a list or a scalar, where a map with `domain` is expected.
    #[error("error loading config file: the document is {0}, not a map")]
    NotAMap(String),
    /// A map key that is a number, a boolean, null or a collection.
    #[error("config error, key is not of type string: {0}")]
    NonStringKey(String),
    /// A key outside ratelimit's list (`validKeys`), at any depth but inside `metadata`.
    #[error("config error, unknown key '{0}'")]
    UnknownKey(String),
    /// A list item that is not a map (every list in the format is a list of maps).
    #[error("config error, yaml file contains list of type other than map: {0}")]
    NonMapListItem(String),
    /// A float or an integer past 64 bits, anywhere outside `metadata`: go-yaml v2 reads them
    /// as types ratelimit's key check does not accept ("error checking config").
    #[error(
        "error checking config: `{0}` is a float or too large a number; quote it to make it a string"
    )]
    BadScalar(String),
    /// A value of the wrong type for its field (go-yaml's "cannot unmarshal").
    #[error("cannot unmarshal {found} into {field} ({expected})")]
    WrongType {
        field: &'static str,
        expected: &'static str,
        found: String,
    },
    /// `domain` missing or empty.
    #[error("config file cannot have empty domain")]
    EmptyDomain,
    /// A second file with a domain an earlier file has.
    #[error("duplicate domain '{domain}' in config file (first in {first})")]
    DuplicateDomain { domain: String, first: String },
    /// A descriptor without `key`, or with an empty one.
    #[error("descriptor has empty key")]
    EmptyKey,
    /// Two siblings with the same `key` and `value` (or `key_value` spelt both ways).
    #[error("duplicate descriptor composite key '{0}'")]
    DuplicateKey(String),
    /// A `unit` that is none of second, minute, hour, day, week, month, year (any case).
    #[error("invalid rate limit unit '{0}'")]
    BadUnit(String),
    /// `unlimited: true` beside a valid `unit`.
    #[error("should not specify rate limit unit when unlimited")]
    UnlimitedWithUnit,
    /// A `replaces` item without a `name`.
    #[error("should not have an empty replaces entry")]
    ReplacesEmpty,
    /// A `replaces` item naming the rule it belongs to.
    #[error("replaces should not contain name of same descriptor")]
    ReplacesSelf,
    /// `share_threshold: true` on a descriptor whose key and value have no `*`.
    #[error(
        "share_threshold can only be used with wildcard values (containing '*'), but found key '{0}'"
    )]
    ShareThresholdWithoutWildcard(String),
}

/// Every problem a load found, in file order; displayed one per line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct RlsErrors(pub Vec<RlsError>);

impl fmt::Display for RlsErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}
