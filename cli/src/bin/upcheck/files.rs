//! What the commands read and write: an input at a path or on standard input (`-`), named so in
//! messages, and an output replaced atomically or written to standard output.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use upcheck_cli::plugin::{self, Source};
use upcheck_cli::{caddy, output};
use upcheck_policy::ConfigError;

use crate::Failure;

/// The name an input goes by in messages and in the written file.
pub(crate) fn name(path: &Path) -> String {
    if path == Path::new("-") {
        "standard input".into()
    } else {
        path.display().to_string()
    }
}

/// The bytes at `path`, or on standard input for `-`.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>, Failure> {
    let mut bytes = Vec::new();
    let read = if path == Path::new("-") {
        io::stdin().read_to_end(&mut bytes).map(|_| ())
    } else {
        std::fs::read(path).map(|b| bytes = b)
    };
    read.map_err(|e| Failure::Input(format!("{}: cannot read: {e}", name(path))))?;
    Ok(bytes)
}

/// `error` in the input at `path`.
pub(crate) fn invalid(path: &Path, error: ConfigError) -> Failure {
    Failure::Input(format!("{}: {error}", name(path)))
}

/// The input of `upcheck envoy` or `upcheck nginx`: where it was read from, and what it says.
pub(crate) fn source(
    from_caddy: Option<&PathBuf>,
    config: Option<&PathBuf>,
) -> Result<(PathBuf, Source), Failure> {
    match (from_caddy, config) {
        (Some(path), _) => Ok((
            path.clone(),
            caddy::import(&read(path)?).map_err(|e| invalid(path, e))?,
        )),
        (None, Some(path)) => Ok((
            path.clone(),
            plugin::read(&read(path)?).map_err(|e| invalid(path, e))?,
        )),
        (None, None) => Err(Failure::Input(
            "give a plugin configuration, or Caddy's with --from-caddy".into(),
        )),
    }
}

/// Writes `text` to `out`, or to standard output.
pub(crate) fn write_out(out: Option<&PathBuf>, text: &str) -> Result<(), Failure> {
    match out {
        Some(out) => output::replace(out, text)
            .map_err(|e| Failure::Output(format!("{}: cannot write: {e}", out.display()))),
        None => io::stdout()
            .write_all(text.as_bytes())
            .map_err(|e| Failure::Output(format!("standard output: {e}"))),
    }
}
