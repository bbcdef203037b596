//! [`ConfigError`]: a configuration that cannot be run, with the JSON path of the field and the
//! reason. A module of its own because both steps of reading (the grammars through serde, and
//! `validate`) refuse through it, and the operator reading Envoy's log has only its words.

use std::fmt;

/// A configuration that cannot be run: where in the JSON, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// JSON path of the offending field, e.g. `health_checks.passive.max_fails` or
    /// `upstreams[1].name`; empty for the document itself.
    pub path: String,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    pub(crate) fn new(path: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            path: path.into(),
            reason: reason.into(),
        }
    }

    /// A read error: a broken document says where (line and column); a field that is wrong says
    /// its path instead.
    pub(crate) fn read(e: &serde_json::Error, path: String) -> ConfigError {
        if !e.is_data() {
            return ConfigError::new("", format!("not valid JSON: {e}"));
        }
        let text = e.to_string();
        let position = format!(" at line {} column {}", e.line(), e.column());
        let reason = text.strip_suffix(&position).unwrap_or(&text);
        let path = if path == "." { String::new() } else { path };
        ConfigError::new(path, reason)
    }
}
