//! `upcheck simulate`: the module in the wasmtime host, on virtual time.

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::Args;
use upcheck_cli::scenario::{self, Scenario};
use upcheck_cli::simulation::{self, Plan, Run};
use upcheck_cli::timeline::{self, Shown};
use upcheck_host_tests::HostError;
use upcheck_policy::duration::display;

use crate::files::{invalid, name, read};
use crate::Failure;

#[derive(Args)]
pub(crate) struct SimulateArgs {
    /// The plugin configuration (JSON); `-` reads standard input. Default: each of the
    /// scenario's backends an upstream, everything else default.
    config: Option<PathBuf>,
    /// A built-in scenario: incident, hang, db-blip, blip-after-down, pages-500, slow.
    #[arg(
        long,
        value_name = "NAME",
        required_unless_present = "scenario_file",
        conflicts_with = "scenario_file"
    )]
    scenario: Option<String>,
    /// A scenario file (JSON): backends, what each answers over time, request rate, duration.
    #[arg(long, value_name = "FILE")]
    scenario_file: Option<PathBuf>,
    /// A second plugin configuration: the same scenario runs with it, shown beside the first.
    #[arg(long, value_name = "OTHER.json")]
    compare: Option<PathBuf>,
    /// The module to run, as on the load balancer (`make build` writes target/upcheck.wasm).
    #[arg(
        long,
        value_name = "PATH",
        env = "UPCHECK_WASM",
        default_value = "/etc/upcheck/upcheck.wasm"
    )]
    wasm: PathBuf,
    /// A row for every second; by default seconds where nothing changed and nobody failed or
    /// waited are folded into one row with their totals.
    #[arg(long)]
    every_second: bool,
}

/// The scenario named on the command line.
fn scenario(args: &SimulateArgs) -> Result<Scenario, Failure> {
    match (&args.scenario, &args.scenario_file) {
        (Some(name), _) => {
            scenario::builtin(name).map_err(|e| Failure::Input(format!("--scenario: {e}")))
        }
        (None, Some(path)) => scenario::read(&read(path)?).map_err(|e| invalid(path, e)),
        (None, None) => Err(Failure::Input(
            "give a scenario: --scenario NAME or --scenario-file FILE".into(),
        )),
    }
}

/// The configuration at `path` (the default one without), fitted to `scenario`, and its label.
fn fitted(path: Option<&Path>, scenario: &Scenario) -> Result<(Plan, String), Failure> {
    match path {
        Some(path) => {
            let plan = simulation::plan(&read(path)?, scenario).map_err(|e| invalid(path, e))?;
            Ok((plan, name(path)))
        }
        None => {
            let document = simulation::default_document(scenario).to_string();
            let plan = simulation::plan(document.as_bytes(), scenario)
                .map_err(|e| Failure::Input(format!("the default configuration: {e}")))?;
            Ok((plan, format!("default ({document})")))
        }
    }
}

pub(crate) fn run(args: SimulateArgs) -> Result<(), Failure> {
    let scenario = scenario(&args)?;
    let mut plans = vec![fitted(args.config.as_deref(), &scenario)?];
    if let Some(other) = &args.compare {
        plans.push(fitted(Some(other), &scenario)?);
    }
    let started = Instant::now();
    let runs = plans
        .iter()
        .map(|(plan, _)| plan.run(&args.wasm, &scenario))
        .collect::<Result<Vec<Run>, HostError>>()
        .map_err(|e| match e {
            HostError::Load(why) => Failure::Input(format!(
                "--wasm {}: {why} (`make build` writes target/upcheck.wasm)",
                args.wasm.display()
            )),
            other => Failure::Output(format!("the simulation stopped: {other}")),
        })?;
    let took = started.elapsed();

    let mut text = String::new();
    let title = args
        .scenario
        .clone()
        .unwrap_or_else(|| args.scenario_file.as_deref().map(name).unwrap_or_default());
    text.push_str(&format!("scenario {title}: {}\n", scenario.about));
    text.push_str(&format!(
        "{}, {} workers, {}\n",
        timeline::pace(&scenario),
        simulation::WORKERS,
        args.wasm
            .canonicalize()
            .unwrap_or(args.wasm.clone())
            .display()
    ));
    let labels: Vec<&str> = if plans.len() == 1 {
        vec![""]
    } else {
        vec!["A", "B"]
    };
    for ((plan, label), tag) in plans.iter().zip(&labels) {
        if tag.is_empty() {
            text.push_str(&format!("configuration: {label}\n"));
        } else {
            text.push_str(&format!("{tag}: {label}\n"));
        }
        if let Some(note) = plan.routing_note() {
            text.push_str(&format!("note: {note}\n"));
        }
    }
    text.push('\n');
    let shown: Vec<Shown> = labels
        .iter()
        .zip(&runs)
        .map(|(label, run)| Shown { label, run })
        .collect();
    text.push_str(&timeline::render(&scenario, &shown, args.every_second));
    let requests: usize = runs.iter().map(|run| run.requests.len()).sum();
    text.push_str(&format!(
        "\nsimulated {} of traffic ({requests} requests over {} run{}) in {:.2} s\n",
        display(scenario.duration),
        runs.len(),
        if runs.len() == 1 { "" } else { "s" },
        took.as_secs_f64()
    ));
    io::stdout()
        .write_all(text.as_bytes())
        .map_err(|e| Failure::Output(format!("standard output: {e}")))
}
