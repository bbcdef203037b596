//! A wall clock set off for one process, as on a machine whose NTP is broken: a small library of
//! the test's own (`clock/skew.c`), built with the machine's C compiler on first use and loaded
//! into the process with `LD_PRELOAD`, shifts what the process reads of the wall clock by a
//! fixed offset and leaves its monotonic clocks alone. Envoy reads both through the C library
//! (its log's times and the time proxy-wasm gives a module move; its timers do not).
//!
//! Debian's `faketime` does the same but hangs an Envoy as it starts (its library resolves the
//! real clock functions while Envoy's allocator, which reads the clock, is itself starting).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{anyhow, Result};

/// The variable the library reads its offset from, in milliseconds.
pub const OFFSET_VARIABLE: &str = "UPCHECK_CLOCK_OFFSET_MS";

/// The library, built once per test process: its path.
pub fn library() -> Result<&'static Path> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| {
        let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/clock/skew.c");
        let out =
            std::env::temp_dir().join(format!("upcheck-clock-skew-{}.so", std::process::id()));
        let status = Command::new("cc")
            .args(["-shared", "-fPIC", "-O2", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .map_err(|e| format!("cannot run the C compiler (cc): {e}"))?;
        match status.success() {
            true => Ok(out),
            false => Err(format!("cc could not build {}: {status}", source.display())),
        }
    });
    built.as_deref().map_err(|e| anyhow!("{e}"))
}

/// The environment that sets a process's wall clock `offset_ms` milliseconds off (ahead when
/// positive).
pub fn offset(offset_ms: i64) -> Result<Vec<(&'static str, String)>> {
    Ok(vec![
        ("LD_PRELOAD", library()?.display().to_string()),
        (OFFSET_VARIABLE, offset_ms.to_string()),
    ])
}
