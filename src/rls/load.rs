//! Reading the YAML from disk as envoyproxy/ratelimit's runtime does: one file, or every
//! `*.yaml` / `*.yml` file directly in a folder (symbolic links followed, subfolders not —
//! a Kubernetes ConfigMap's `..data` folder would load each file twice), in name order, so
//! the first of two files with one domain is the same on every load.

use std::path::{Path, PathBuf};

use super::error::{Problem, RlsError, RlsErrors};
use super::tree::{self, RlsConfig};
use super::yaml;

impl RlsConfig {
    /// The config in `path`, a file or a folder; every problem of every file at once.
    pub fn load(path: &Path) -> Result<RlsConfig, RlsErrors> {
        let read_error = |e: std::io::Error| {
            RlsErrors(vec![RlsError {
                file: path.to_path_buf(),
                line: 0,
                at: String::new(),
                problem: Problem::Read(e.to_string()),
            }])
        };
        let files = if path.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(path)
                .map_err(read_error)?
                .filter_map(|entry| entry.ok().map(|e| e.path()))
                .filter(|p| p.is_file() && p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            files.sort();
            files
        } else {
            vec![path.to_path_buf()]
        };
        let mut errors = Vec::new();
        let mut texts = Vec::with_capacity(files.len());
        for file in files {
            match std::fs::read_to_string(&file) {
                Ok(text) => texts.push((file, text)),
                Err(e) => errors.push(RlsError {
                    file,
                    line: 0,
                    at: String::new(),
                    problem: Problem::Read(e.to_string()),
                }),
            }
        }
        let config = Self::from_texts_into(&texts, &mut errors);
        finish(config, errors)
    }

    /// The config of `(name, text)` pairs, in that order (names are for messages).
    pub fn from_texts(texts: &[(PathBuf, String)]) -> Result<RlsConfig, RlsErrors> {
        let mut errors = Vec::new();
        let config = Self::from_texts_into(texts, &mut errors);
        finish(config, errors)
    }

    fn from_texts_into(texts: &[(PathBuf, String)], errors: &mut Vec<RlsError>) -> RlsConfig {
        let parsed = texts
            .iter()
            .filter_map(|(name, text)| Some((name.clone(), yaml::parse(name, text, errors)?)))
            .collect();
        tree::build(parsed, errors)
    }
}

/// The config, or its problems in file then line order (the decoding and the tree's checks
/// find them in two passes).
fn finish(config: RlsConfig, mut errors: Vec<RlsError>) -> Result<RlsConfig, RlsErrors> {
    if errors.is_empty() {
        return Ok(config);
    }
    errors.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Err(RlsErrors(errors))
}
