//! `upcheck-bench`: what upcheck costs and what it buys, measured side by side in one run and
//! printed as one Markdown table under the machine line. It measures; it never fails a target.
//!
//! Method. Sizes are the files as shipped (`wasm-opt -Oz`). Instructions are wasmtime fuel in the
//! host-tests proxy-wasm host (a main-thread VM and two workers, all backends answering 200, after
//! a warm-up): deterministic, so they compare across machines; per request is every callback of
//! the request's context, with the deployed configuration (`config/upcheck.json`, so outlier
//! detection on) in cluster and in host routing. The floor is a filter that only sets one request
//! header (bench/floor), measured the same way. Memory is the largest VM's `memory.size` after
//! warm-up and after a long run, read through an instrumented copy of the module (see
//! [`instrument`]), which also counts hostcalls, per callback. Throughput is Envoy `--concurrency 1` pinned to core 0, wrk and the upstreams pinned
//! to core 1, four setups up side by side and loaded in alternating rounds; the bottleneck check
//! (the upstream alone, each core's load) is printed with the figures. Probes per interval and the
//! detection runs use real Envoys and the e2e fake upstreams; they run concurrently with the host
//! figures, which do not depend on load (fuel and pages are counts). Start-up is Envoy started
//! again and again with each module, alone on the machine (see [`startup`]). Every run is
//! bounded: fixed counts, fixed durations, timeouts on every wait.
//!
//! ```text
//! upcheck-bench --envoy PATH --upcheck target/upcheck.wasm --floor target/floor.wasm
//! upcheck-bench --only in-host --upcheck OTHER.wasm     # the host figures alone, no Envoy
//! upcheck-bench --only fuel --upcheck OTHER.wasm        # … without the memory runs: seconds
//! ```
//! (`make -f mk/bench.mk bench` builds and installs everything, then runs it.)

mod callbacks;
mod detection;
mod effort;
mod inhost;
mod instrument;
mod machine;
mod probes;
mod profile;
mod proxy;
mod report;
mod rewrite;
mod startup;
mod throughput;
mod upstream;
mod wrk;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use effort::Effort;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Measures upcheck.wasm against the floor filter and Envoy's own health checks.
#[derive(Parser)]
struct Args {
    /// The Envoy 1.40 binary.
    #[arg(long, env = "UPCHECK_ENVOY")]
    envoy: Option<PathBuf>,
    /// upcheck.wasm as shipped.
    #[arg(long, env = "UPCHECK_WASM", default_value = "target/upcheck.wasm")]
    upcheck: PathBuf,
    /// upcheck.wasm with its function names (the same build and wasm-opt, names kept), for
    /// where a request's instructions go.
    #[arg(
        long,
        env = "UPCHECK_NAMED_WASM",
        default_value = "target/upcheck.named.wasm"
    )]
    named: PathBuf,
    /// The floor filter, built and optimized like upcheck.
    #[arg(long, env = "UPCHECK_FLOOR_WASM", default_value = "target/floor.wasm")]
    floor: PathBuf,
    /// Where Envoys keep their bootstrap and logs.
    #[arg(long, default_value = "target/bench")]
    out: PathBuf,
    /// Measure only this part (repeat for several); every part when absent. The sizes are
    /// always printed. Only the parts that run Envoy need it.
    #[arg(long, value_enum)]
    only: Vec<Part>,
    /// Every step of every part once, as briefly as each allows: whether the benchmark runs,
    /// not what it measures (`make test` runs it so; see `effort.rs`).
    #[arg(long)]
    quick: bool,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Serves upstreams answering 200, printing `NAME ADDR` for each, until stdin closes.
    #[command(hide = true)]
    Upstreams {
        /// Serve the e2e fake upstream in `ok` mode instead of the bench's own.
        #[arg(long)]
        e2e: bool,
        /// Their names.
        names: Vec<String>,
    },
}

/// A part of the bench, by the table's items.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Part {
    /// 3: requests through four Envoys under wrk.
    Throughput,
    /// 7: Envoy's start-up with each module.
    StartUp,
    /// 2 and 4: fuel, hostcalls and the memory runs in the wasmtime host (minutes, no Envoy).
    InHost,
    /// 2 alone: fuel and hostcalls in the wasmtime host, without the memory runs (seconds).
    Fuel,
    /// 5: probes per interval in real Envoys.
    Probes,
    /// 6: detection runs in real Envoys.
    Detection,
}

/// The operators' plugin configuration (`config/upcheck.json`, routing by cluster as in
/// `config/envoy-simple.yaml`).
pub fn deployed_config() -> serde_json::Value {
    serde_json::from_str(include_str!("../../config/upcheck.json"))
        .unwrap_or_else(|e| panic!("config/upcheck.json does not parse: {e}"))
}

fn main() -> Result<()> {
    let args = Args::parse();
    match args.command {
        Some(Command::Upstreams { e2e, names }) => upstream::serve(&names, e2e),
        None => {
            let runtime = tokio::runtime::Runtime::new()?;
            let effort = match args.quick {
                true => Effort::QUICK,
                false => Effort::FULL,
            };
            runtime.block_on(bench(
                args.envoy.as_deref(),
                &args.only,
                effort,
                &args.upcheck,
                &args.named,
                &args.floor,
                &args.out,
            ))
        }
    }
}

/// Runs the measurements of `parts` (all when empty) and prints the table.
async fn bench(
    envoy: Option<&Path>,
    parts: &[Part],
    effort: Effort,
    upcheck: &Path,
    named: &Path,
    floor: &Path,
    out: &Path,
) -> Result<()> {
    let started = Instant::now();
    let runs = |part| parts.is_empty() || parts.contains(&part);
    // The Envoy to run `part` with, if it runs.
    let envoy_for = |part| -> Result<Option<&Path>> {
        if !runs(part) {
            return Ok(None);
        }
        envoy.map(Some).with_context(|| {
            format!(
                "no Envoy for {part:?}: pass --envoy or set UPCHECK_ENVOY (mk/envoy.mk installs it)"
            )
        })
    };
    let read = |path: &Path| std::fs::read(path).with_context(|| format!("{}", path.display()));
    let (upcheck_wasm, floor_wasm) = (read(upcheck)?, read(floor)?);
    let named_wasm = read(named)?;
    std::fs::create_dir_all(out)?;
    // The Envoys of earlier runs (bootstrap and log each): only the last run's are kept.
    for entry in std::fs::read_dir(out)? {
        let path = entry?.path();
        if path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("envoy-"))
        {
            std::fs::remove_dir_all(&path)?;
        }
    }
    let throughput = match envoy_for(Part::Throughput)? {
        Some(envoy) => {
            eprintln!(
                "bench: throughput, {} rounds of 4 setups…",
                effort.throughput_rounds
            );
            Some(throughput::measure(envoy, upcheck, floor, out, &effort).await?)
        }
        None => None,
    };
    let start_up = match envoy_for(Part::StartUp)? {
        Some(envoy) => {
            eprintln!(
                "bench: start-up, {} starts of 4 setups…",
                effort.start_up_repeats
            );
            Some(startup::measure(envoy, upcheck, floor, out, effort.start_up_repeats).await?)
        }
        None => None,
    };
    eprintln!("bench: host figures, probes and detection (those asked for), concurrently…");
    let memory = runs(Part::InHost).then_some(effort.memory_runs);
    let host = (memory.is_some() || runs(Part::Fuel)).then(|| {
        std::thread::spawn(move || inhost::figures(&upcheck_wasm, &floor_wasm, &named_wasm, memory))
    });
    let probes = async {
        let Some(envoy) = envoy_for(Part::Probes)? else {
            return Ok(None);
        };
        let per =
            |workers| probes::per_interval(envoy, upcheck, workers, effort.probe_intervals, out);
        let (one, two, four) = tokio::try_join!(per(1), per(2), per(4))?;
        anyhow::Ok(Some([one, two, four]))
    };
    let detection = async {
        let Some(envoy) = envoy_for(Part::Detection)? else {
            return Ok(None);
        };
        let [a, b, c, d] = detection::cases();
        let replay = (effort.detection_length, effort.detection_break_at);
        let run = |case| detection::run(envoy, upcheck, case, replay, out);
        let (a, b, c, d) = tokio::try_join!(run(a), run(b), run(c), run(d))?;
        anyhow::Ok(Some([a, b, c, d]))
    };
    let (probes, detection) = tokio::join!(probes, detection);
    let host = match host {
        Some(thread) => Some(
            thread
                .join()
                .map_err(|_| anyhow::anyhow!("the host figures panicked"))??,
        ),
        None => None,
    };
    let report = report::Report {
        machine: machine::line(),
        sizes: report::Sizes {
            upcheck: std::fs::metadata(upcheck)?.len(),
            floor: std::fs::metadata(floor)?.len(),
        },
        host,
        throughput,
        start_up,
        probes: probes?,
        detection: detection?,
        effort,
        elapsed: started.elapsed(),
    };
    println!("{report}");
    Ok(())
}
