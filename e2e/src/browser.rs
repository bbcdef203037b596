//! A real browser looking at a page: Debian's chromium, headless.
//!
//! The HTML status page is meant for a person in a browser, so its scenario reads it the way one
//! does: a browser parses it (what it shows is the DOM, not the bytes sent) and draws it (a
//! screenshot to look at). Chromium comes from Debian's package at [`CHROMIUM`] (`make e2e`
//! installs it); a scenario fails, never skips, without it. Each run gets its own profile
//! directory and is killed if it does not finish within [`PATIENCE`].

use std::fs::File;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

/// Where Debian's `chromium` package puts the browser.
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one headless run may take (its first start on a cold disk is slow).
const PATIENCE: Duration = Duration::from_secs(60);

/// What a headless run printed.
struct Printed {
    stdout: String,
    stderr: String,
}

/// The DOM of the page at `url` after it loaded, serialized (`--dump-dom`).
pub async fn dump_dom(url: &str) -> Result<String> {
    let printed = headless(vec!["--dump-dom".to_owned(), url.to_owned()]).await?;
    Ok(printed.stdout)
}

/// Draws the page at `url` in a `width` × `height` window and saves it as PNG at `png`.
pub async fn screenshot(url: &str, png: &Path, width: u32, height: u32) -> Result<()> {
    let printed = headless(vec![
        format!("--screenshot={}", png.display()),
        format!("--window-size={width},{height}"),
        url.to_owned(),
    ])
    .await?;
    ensure!(
        png.is_file(),
        "chromium wrote no screenshot at {}: {}",
        png.display(),
        printed.stderr
    );
    Ok(())
}

/// Runs chromium headless with `args` after the flags every run needs, in a fresh profile.
async fn headless(args: Vec<String>) -> Result<Printed> {
    ensure!(
        Path::new(CHROMIUM).is_file(),
        "{CHROMIUM} not found: install Debian's chromium (`make e2e` does: apt-get install chromium)"
    );
    tokio::task::spawn_blocking(move || run(&args)).await?
}

/// Runs chromium to the end or to [`PATIENCE`]; its output goes to files in its profile
/// directory, so a large page cannot fill a pipe and stall it.
fn run(args: &[String]) -> Result<Printed> {
    let profile = tempfile::Builder::new()
        .prefix("upcheck-chromium-")
        .tempdir()?;
    let stdout = profile.path().join("stdout");
    let stderr = profile.path().join("stderr");
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!(
            "--user-data-dir={}",
            profile.path().join("data").display()
        ))
        .args(args)
        .stdin(Stdio::null())
        .stdout(File::create(&stdout)?)
        .stderr(File::create(&stderr)?)
        .spawn()
        .with_context(|| format!("starting {CHROMIUM}"))?;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if started.elapsed() > PATIENCE {
            child.kill()?;
            child.wait()?;
            bail!(
                "chromium {args:?} did not finish within {PATIENCE:?}: {}",
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let printed = Printed {
        stdout: std::fs::read_to_string(&stdout)?,
        stderr: std::fs::read_to_string(&stderr)?,
    };
    ensure!(
        status.success(),
        "chromium {args:?}: {status}: {}",
        printed.stderr
    );
    Ok(printed)
}
