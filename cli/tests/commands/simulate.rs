//! `upcheck simulate` runs the real upcheck.wasm (from `make build`) through a scenario and tells
//! what users saw. These tests read its table: one row per second (or per folded run of quiet
//! seconds, or the total), three numbers per backend and configuration: requests, failed, slow.

use crate::common;

use std::fs;
use std::process::Output;

use common::{stderr, upcheck, workspace};

/// Runs `upcheck simulate args` at the workspace root and returns standard output; it must succeed.
fn simulate(args: &[&str]) -> String {
    let mut all = vec!["simulate"];
    all.extend(args);
    let output = upcheck(&workspace(), &all, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// The table's rows: their label (`12s`, `6-59s`, `total`) and their numbers.
fn rows(stdout: &str) -> Vec<(String, Vec<u64>)> {
    stdout
        .lines()
        .filter_map(|line| {
            let mut words = line.split_whitespace();
            let label = words.next()?;
            let numbers: Option<Vec<u64>> = words.map(|w| w.parse().ok()).collect();
            let numbers = numbers.filter(|n| !n.is_empty() && n.len() % 3 == 0)?;
            (label.ends_with('s') || label == "total").then(|| (label.to_string(), numbers))
        })
        .collect()
}

/// The row labelled `label`.
fn row(stdout: &str, label: &str) -> Vec<u64> {
    rows(stdout)
        .into_iter()
        .find(|(l, _)| l == label)
        .map(|(_, numbers)| numbers)
        .unwrap_or_else(|| panic!("no row {label}:\n{stdout}"))
}

/// Requests, failed, slow of column `column` (0: the first backend of the first configuration).
fn cell(numbers: &[u64], column: usize) -> (u64, u64, u64) {
    let at = column * 3;
    (numbers[at], numbers[at + 1], numbers[at + 2])
}

/// Runs `upcheck simulate args` in a directory holding `files`, expecting a refusal: exit status
/// 2, nothing on standard output. Returns the message.
fn refused(args: &[&str], files: &[(&str, &str)]) -> String {
    let dir = tempfile::tempdir().expect("a temporary directory");
    for (name, text) in files {
        fs::write(dir.path().join(name), text).expect("written");
    }
    let mut all = vec!["simulate"];
    all.extend(args);
    let output: Output = upcheck(dir.path(), &all, b"");
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(output.stdout.is_empty(), "nothing on standard output");
    message
}

#[test]
fn in_the_incident_with_the_default_configuration_app2_never_receives_a_user() {
    let stdout = simulate(&["--scenario", "incident"]);
    let total = row(&stdout, "total");
    assert_eq!(cell(&total, 1), (0, 0, 0), "app2's users:\n{stdout}");
    assert_eq!(
        cell(&total, 0),
        (2400, 0, 0),
        "app1 took everyone:\n{stdout}"
    );
    assert!(
        stdout.contains("app2 0 requests, 0 failed, 0 slow"),
        "{stdout}"
    );
    let joins = stdout
        .find("scenario: app2 joins")
        .expect("the join is shown");
    let unhealthy = stdout.find("app2 unhealthy").expect("the probe verdict");
    assert!(joins < unhealthy, "{stdout}");
}

#[test]
fn with_pages_answering_500_each_failure_is_counted_against_the_backend_that_answered_it() {
    let stdout = simulate(&["--scenario", "pages-500", "--every-second"]);
    let per_second: Vec<(String, Vec<u64>)> = rows(&stdout)
        .into_iter()
        .filter(|(label, _)| label != "total")
        .collect();
    assert_eq!(per_second.len(), 60, "a row every second:\n{stdout}");
    let mut app2_failed = 0;
    for (second, (label, numbers)) in per_second.iter().enumerate() {
        assert_eq!(label, &format!("{second}s"));
        let (_, app1_failed, _) = cell(numbers, 0);
        let (app2_requests, failed, _) = cell(numbers, 1);
        assert_eq!(app1_failed, 0, "app1 answers its pages, second {second}");
        let expected = if second < 20 { 0 } else { app2_requests };
        assert_eq!(
            failed, expected,
            "every page app2 answers from 20 s on fails"
        );
        app2_failed += failed;
    }
    assert!(app2_failed > 0, "the 500s reached users:\n{stdout}");
    assert_eq!(cell(&row(&stdout, "total"), 1).1, app2_failed);
}

#[test]
fn in_a_rolling_deploy_with_the_drain_signal_no_user_fails_and_each_backend_serves_again() {
    let stdout = simulate(&["--scenario", "deploy"]);
    let total = row(&stdout, "total");
    let (app1, app2) = (cell(&total, 0), cell(&total, 1));
    assert_eq!((app1.1, app1.2, app2.1, app2.2), (0, 0, 0, 0), "{stdout}");
    assert_eq!(app1.0 + app2.0, 3600, "{stdout}");
    for name in ["app1", "app2"] {
        let drains = stdout
            .find(&format!("{name} draining, no new requests"))
            .unwrap_or_else(|| panic!("{name} drains:\n{stdout}"));
        let back = stdout
            .find(&format!("{name} no longer draining"))
            .unwrap_or_else(|| panic!("{name} comes back:\n{stdout}"));
        assert!(drains < back, "{stdout}");
    }
    // After its return, each backend takes users again: the last rows are shared.
    let last = rows(&stdout)
        .into_iter()
        .rfind(|(label, _)| label != "total")
        .map(|(_, numbers)| numbers)
        .unwrap_or_default();
    assert!(cell(&last, 0).0 > 0 && cell(&last, 1).0 > 0, "{stdout}");
}

#[test]
fn compare_prints_both_configurations_side_by_side_with_a_summary_for_each() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let counting_500 = dir.path().join("counting-500.json");
    fs::write(
        &counting_500,
        r#"{"upstreams": [{"name": "app1"}, {"name": "app2"}],
            "health_checks": {"passive": {"unhealthy_status": [500, 502, 503, 504]}}}"#,
    )
    .expect("written");
    let other = counting_500.to_str().expect("UTF-8 path");
    let stdout = simulate(&["--scenario", "pages-500", "--compare", other]);
    for title in ["A app1", "A app2", "B app1", "B app2"] {
        assert!(stdout.contains(title), "column {title}:\n{stdout}");
    }
    let table = rows(&stdout);
    assert!(
        table.iter().all(|(_, numbers)| numbers.len() == 12),
        "every row has both configurations' columns:\n{stdout}"
    );
    let total = row(&stdout, "total");
    let (a, b) = (cell(&total, 1), cell(&total, 3));
    assert_eq!(
        cell(&total, 0).0 + a.0,
        cell(&total, 2).0 + b.0,
        "the same users"
    );
    assert!(
        b.1 < a.1,
        "counting 500 as a failure spares users:\n{stdout}"
    );
    assert!(stdout.contains(&format!("A: app1 {} requests", cell(&total, 0).0)));
    assert!(stdout.contains(&format!("B: app1 {} requests", cell(&total, 2).0)));
}

#[test]
fn a_scenario_file_runs_at_its_own_rate_and_length_with_a_backend_joining() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("scenario.json");
    fs::write(
        &file,
        r#"{"rate": 10, "duration": "10s",
            "backends": [{"name": "web1"}, {"name": "web2", "added": "5s", "up": "hang"}]}"#,
    )
    .expect("written");
    let path = file.to_str().expect("UTF-8 path");
    let stdout = simulate(&["--scenario-file", path]);
    let total = row(&stdout, "total");
    assert_eq!(cell(&total, 0), (100, 0, 0), "{stdout}");
    assert_eq!(cell(&total, 1), (0, 0, 0), "{stdout}");
}

#[test]
fn a_scenario_file_with_an_error_exits_2_naming_the_path() {
    let message = refused(
        &["--scenario-file", "scenario.json"],
        &[(
            "scenario.json",
            r#"{"backends": [{"name": "app1"},
                             {"name": "app2", "changes": [{"at": "20s", "pages": "five hundred"}]}]}"#,
        )],
    );
    assert!(
        message.starts_with("upcheck: scenario.json: backends[1].changes[0].pages: "),
        "{message}"
    );
}

#[test]
fn a_configuration_naming_other_backends_than_the_scenario_is_refused() {
    let message = refused(
        &["config.json", "--scenario", "incident"],
        &[("config.json", r#"{"upstreams": [{"name": "web1"}]}"#)],
    );
    assert!(
        message.starts_with("upcheck: config.json: upstreams: the configuration names web1"),
        "{message}"
    );
}

#[test]
fn an_unknown_scenario_is_refused_with_the_built_in_names() {
    let message = refused(&["--scenario", "flood"], &[]);
    assert!(message.contains("incident, hang, db-blip"), "{message}");
}

#[test]
fn in_the_grpc_scenario_a_backend_not_serving_from_the_start_never_receives_a_user() {
    let stdout = simulate(&["--scenario", "grpc-not-serving"]);
    let total = row(&stdout, "total");
    assert_eq!(cell(&total, 1), (0, 0, 0), "app2's users:\n{stdout}");
    assert_eq!(
        cell(&total, 0),
        (1200, 0, 0),
        "app1 took everyone:\n{stdout}"
    );
    assert!(
        stdout.contains(r#""health_checks":{"active":{"grpc":{"service":""}}}"#),
        "the default configuration checks by gRPC:\n{stdout}"
    );
    assert!(stdout.contains("app1 healthy: 1 probe passed"), "{stdout}");
    assert!(
        stdout.contains("app2 unhealthy: 1 probe answered NOT_SERVING"),
        "{stdout}"
    );
}

#[test]
fn a_grpc_backend_turning_serving_takes_users_and_answers_that_do_not_fit_the_check_are_refused() {
    let scenario = r#"{"rate": 10, "duration": "20s",
        "backends": [{"name": "app1"},
                     {"name": "app2", "up": "NOT_SERVING", "changes": [{"at": "10s", "up": "SERVING"}]}]}"#;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("scenario.json");
    fs::write(&file, scenario).expect("written");
    let path = file.to_str().expect("UTF-8 path");
    let stdout = simulate(&["--scenario-file", path]);
    let total = row(&stdout, "total");
    let (app2, failed, _) = cell(&total, 1);
    assert_eq!(failed, 0, "{stdout}");
    assert!(
        (40..=60).contains(&app2),
        "app2 takes about half of the 100 users of the last 10 s: {app2}\n{stdout}"
    );
    assert_eq!(cell(&total, 0).0 + app2, 200, "{stdout}");
    let message = refused(
        &["config.json", "--scenario-file", "scenario.json"],
        &[
            ("scenario.json", scenario),
            (
                "config.json",
                r#"{"upstreams": [{"name": "app1"}, {"name": "app2"}]}"#,
            ),
        ],
    );
    assert!(
        message.starts_with(
            "upcheck: config.json: health_checks.active.path: the scenario's backends[1].up is \
             NOT_SERVING, but the configuration probes GET"
        ),
        "{message}"
    );
    let message = refused(
        &["config.json", "--scenario", "incident"],
        &[(
            "config.json",
            r#"{"upstreams": [{"name": "app1"}, {"name": "app2"}],
                "health_checks": {"active": {"grpc": {}}}}"#,
        )],
    );
    assert!(
        message.starts_with(
            "upcheck: config.json: health_checks.active.grpc: the scenario's backends[1].up is \
             502, but the configuration probes by gRPC"
        ),
        "{message}"
    );
}
