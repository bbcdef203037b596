//! A fake app server for manual experiments: the same server the tests start in-process.
//!
//! ```text
//! fake-upstream --name app2 --port 3002 --mode ok --then 5s=status:502 --then 20s=ok
//! curl -X PUT --data noaccept 127.0.0.1:3002/__mode     # break it now
//! curl 127.0.0.1:3002/__counts                         # {"probes":..,"requests":..}
//! ```
//! It prints `listening on 127.0.0.1:PORT` once bound and runs until killed.

use clap::Parser;
use upcheck_e2e::mode::{Mode, Schedule, Switch};
use upcheck_e2e::upstream::FakeUpstream;

/// A fake app server on 127.0.0.1 that behaves, and breaks, on command.
#[derive(Parser)]
struct Args {
    /// Name sent back in the x-fake-upstream header and the body.
    #[arg(long, default_value = "app")]
    name: String,
    /// Port on 127.0.0.1 (0: any free port, printed at start).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// ok, status:N, hang, noaccept, refuse, blip:FROM..TO, flap[:PERIOD], slow:DURATION, pages:N,
    /// trickle:PERIOD, garbage, lag:DURATION, bug:PERCENT%:N or stuckprobe.
    #[arg(long, default_value = "ok")]
    mode: Mode,
    /// A later change of mode, TIME=MODE after start (e.g. 5s=status:502); repeatable.
    #[arg(long = "then")]
    switches: Vec<Switch>,
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let schedule = Schedule {
        first: args.mode,
        switches: args.switches,
    };
    let upstream = FakeUpstream::bind(args.port, &args.name, schedule).await?;
    println!("listening on {}", upstream.addr());
    std::future::pending().await
}
