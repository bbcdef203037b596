//! FILE and the files of its membership directory, written in the order that keeps Envoy's
//! view whole (a backend's cluster before any filter names it), and the lock that lets one
//! change at a time write them.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::state::{directory, input, state_file, Refusal, State};
use crate::deployment::Deployment;
use crate::envoy::{clusters_file, membership_files, render, Settings};
use crate::output;

/// Writes `file` and its membership directory for `deployment` as `upcheck envoy --membership`
/// does: the state, the files Envoy reads while it runs, then `file` itself.
pub fn write(file: &Path, state: &State) -> Result<(), Refusal> {
    let (deployment, settings) = state.plan(file)?;
    let dir = directory(file).map_err(|e| Refusal::Output(e.to_string()))?;
    fs::create_dir_all(&dir)
        .map_err(|e| Refusal::Output(format!("{}: cannot create: {e}", dir.display())))?;
    write_files(&dir, state, &deployment, &settings)?;
    replace(file, &render(&deployment, &settings))
}

fn replace(path: &Path, text: &str) -> Result<(), Refusal> {
    output::replace(path, text)
        .map_err(|e| Refusal::Output(format!("{}: cannot write: {e}", path.display())))
}

/// The state, then the clusters, then each filter's configuration: a backend's cluster is in
/// place before any filter names it.
fn write_files(
    dir: &Path,
    state: &State,
    deployment: &Deployment,
    settings: &Settings,
) -> Result<(), Refusal> {
    write_state(dir, state)?;
    write_part(deployment, settings, Part::Clusters)?;
    write_part(deployment, settings, Part::Filters)
}

/// Writes FILE's state into its membership directory `dir`.
pub(super) fn write_state(dir: &Path, state: &State) -> Result<(), Refusal> {
    let json = serde_json::to_string_pretty(state)
        .map_err(|e| Refusal::Output(format!("the membership as JSON: {e}")))?;
    replace(&state_file(dir), &format!("{json}\n"))
}

/// Which of the files Envoy reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// The clusters (CDS).
    Clusters,
    /// Both filters' configurations (ECDS).
    Filters,
}

/// Writes the files of `part` for `deployment` as `settings` ask.
pub(super) fn write_part(
    deployment: &Deployment,
    settings: &Settings,
    part: Part,
) -> Result<(), Refusal> {
    for (path, text) in membership_files(deployment, settings) {
        let clusters = path.file_name() == clusters_file(Path::new("")).file_name();
        if clusters == (part == Part::Clusters) {
            replace(&path, &text)?;
        }
    }
    Ok(())
}

/// Holds FILE's membership for the length of one change.
pub(super) struct Lock(PathBuf);

impl Lock {
    /// Takes the lock of membership directory `dir`, or says another command holds it.
    pub(super) fn take(dir: &Path) -> Result<Lock, Refusal> {
        let path = dir.join(".lock");
        match fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut lock) => {
                let _ = writeln!(lock, "{}", std::process::id());
                Ok(Lock(path))
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(input(format!(
                "another `upcheck backends` is changing these backends ({} exists): retry when \
                 it is done (remove the file if no such command runs)",
                path.display()
            ))),
            Err(e) => Err(Refusal::Output(format!("{}: {e}", path.display()))),
        }
    }
}

impl Drop for Lock {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.0);
    }
}
