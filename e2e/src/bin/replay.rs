//! Replays user traffic at a fixed rate and prints one summary line.
//!
//! ```text
//! replay --url http://127.0.0.1:8080/ --rate 40 --duration 20s --csv run.csv
//! requests=800 failures=0 last_failure=- p50=1.1ms p99=3.0ms outcomes=200:800
//! ```

use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use upcheck_e2e::replay::Replay;

/// Sends GET requests at a fixed rate for a fixed time and reports what users saw.
#[derive(Parser)]
struct Args {
    /// The URL every request goes to.
    #[arg(long)]
    url: String,
    /// Requests per second.
    #[arg(long, default_value_t = 40)]
    rate: u32,
    /// How long to send (e.g. 20s).
    #[arg(long, default_value = "10s", value_parser = upcheck_policy::duration::parse)]
    duration: Duration,
    /// How long a user waits for a response (e.g. 2s).
    #[arg(long, default_value = "2s", value_parser = upcheck_policy::duration::parse)]
    timeout: Duration,
    /// A request header, NAME:VALUE; repeatable.
    #[arg(long = "header", value_parser = header)]
    headers: Vec<(String, String)>,
    /// Also write one line per request to this CSV file.
    #[arg(long)]
    csv: Option<PathBuf>,
    /// A new connection for every request, as separate users open them, instead of reusing idle
    /// ones: the proxy spreads connections over its workers, so a figure about every worker (a
    /// cold start) needs it; over kept-alive connections a light load stays on one or two.
    #[arg(long)]
    connection_per_request: bool,
}

fn header(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once(':')
        .ok_or_else(|| format!("{text:?}: a header is written NAME:VALUE"))?;
    Ok((name.trim().to_owned(), value.trim().to_owned()))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let mut replay = Replay::new(args.url, args.rate, args.duration).timeout(args.timeout);
    if args.connection_per_request {
        replay = replay.connection_per_request();
    }
    for (name, value) in args.headers {
        replay = replay.header(name, value);
    }
    let report = replay.run().await?;
    println!("{report}");
    if let Some(path) = args.csv {
        report.write_csv(&path)?;
    }
    Ok(())
}
