//! Listeners and clusters served to Envoy from files, replaced while it runs.
//!
//! Envoy's file-based xDS (`path_config_source`) watches the directory of each file and reloads
//! it when a file is moved onto that name. So every update is written to a temporary file in the
//! same directory and renamed over the old one: Envoy never reads a half-written file, and a
//! plain in-place write (which it would not notice) never happens.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

/// The directory holding `lds.json` and `cds.json`.
#[derive(Clone, Debug)]
pub struct XdsFiles {
    dir: PathBuf,
}

impl XdsFiles {
    /// Uses (and creates) `dir`.
    pub fn create(dir: &Path) -> io::Result<Self> {
        fs::create_dir_all(dir)?;
        Ok(XdsFiles {
            dir: dir.to_owned(),
        })
    }

    /// The listeners file, for the bootstrap's `lds_config`.
    pub fn lds(&self) -> PathBuf {
        self.dir.join("lds.json")
    }

    /// The clusters file, for the bootstrap's `cds_config`.
    pub fn cds(&self) -> PathBuf {
        self.dir.join("cds.json")
    }

    /// Replaces the whole set of listeners.
    pub fn write_listeners(&self, listeners: &[Value]) -> io::Result<()> {
        replace(&self.lds(), listeners)
    }

    /// Replaces the whole set of clusters.
    pub fn write_clusters(&self, clusters: &[Value]) -> io::Result<()> {
        replace(&self.cds(), clusters)
    }
}

/// Writes a discovery response with `resources` beside `path`, then renames it onto `path`.
fn replace(path: &Path, resources: &[Value]) -> io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let staging = path.with_file_name(format!(".{name}.next"));
    fs::write(&staging, json!({"resources": resources}).to_string())?;
    fs::rename(&staging, path)
}
