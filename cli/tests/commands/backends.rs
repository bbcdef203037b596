//! `upcheck backends` refuses what it cannot do with exit status 2 and one line naming the
//! problem, every file as it was (no Envoy runs here: each refusal comes before any change).

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use crate::common::{stderr, upcheck};

const INPUT: &str = r#"{"routing":"host","upstreams":[
    {"name":"app1","address":"127.0.0.1:3001"},
    {"name":"app2","address":"127.0.0.1:3002"}]}"#;

/// Every file under `dir`, by path, with its bytes.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut all = BTreeMap::new();
    let mut pending = vec![dir.to_owned()];
    while let Some(at) = pending.pop() {
        for entry in fs::read_dir(&at).expect("listed") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                all.insert(path.display().to_string(), fs::read(&path).expect("read"));
            }
        }
    }
    all
}

/// A balancer's files as `upcheck envoy --membership` writes them for `input`, in a new
/// directory, with an admin interface and a status page where nothing listens.
fn written(input: &str) -> tempfile::TempDir {
    written_with(input, &[])
}

/// The same, with `more` options to `upcheck envoy`.
fn written_with(input: &str, more: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("input.json"), input).expect("input written");
    let mut args = vec![
        "envoy",
        "input.json",
        "--membership",
        "-o",
        "envoy.yaml",
        "--admin",
        "127.0.0.1:1",
        "--status",
        "127.0.0.1:2",
    ];
    args.extend(more);
    let output = upcheck(dir.path(), &args, b"");
    assert!(output.status.success(), "{}", stderr(&output));
    dir
}

/// Runs `upcheck backends --config envoy.yaml args` on `dir` and checks it was refused as bad
/// input, every file as it was; returns the message without `upcheck: ` and the newline.
fn refused(dir: &Path, args: &[&str]) -> String {
    let before = files(dir);
    let mut all = vec!["backends", "--config", "envoy.yaml"];
    all.extend(args);
    let output = upcheck(dir, &all, b"");
    let message = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{message}");
    assert!(output.stdout.is_empty());
    assert_eq!(files(dir), before, "a refusal changed a file: {message}");
    let message = message
        .strip_prefix("upcheck: ")
        .expect("upcheck's message");
    let line = message.strip_suffix('\n').expect("ends its line");
    assert!(!line.contains('\n'), "one line: {message}");
    line.to_owned()
}

#[test]
fn a_name_already_in_the_pool_is_refused() {
    let dir = written(INPUT);
    let message = refused(dir.path(), &["add", "app2", "127.0.0.1:3009"]);
    assert_eq!(message, "app2: already a backend; remove it first");
}

#[test]
fn an_address_another_backend_has_is_refused() {
    let dir = written(INPUT);
    let message = refused(dir.path(), &["add", "app3", "127.0.0.1:3002"]);
    assert!(
        message.contains("\"127.0.0.1:3002\" is another upstream's address"),
        "{message}"
    );
}

#[test]
fn an_address_that_is_not_host_and_port_is_refused() {
    let dir = written(INPUT);
    let message = refused(dir.path(), &["add", "app3", "nohost"]);
    assert!(message.contains("expected ip:port"), "{message}");
}

#[test]
fn an_address_outside_the_allowed_networks_is_refused() {
    // The input's own addresses are inside: written.
    let dir = written_with(INPUT, &["--allow", "127.0.0.0/8,10.0.0.0/8"]);
    let message = refused(dir.path(), &["add", "app3", "169.254.169.254:80"]);
    assert_eq!(
        message,
        "app3: address: \"169.254.169.254:80\" is outside the networks the balancer admits \
         (--allow 127.0.0.0/8,10.0.0.0/8)"
    );
    let message = refused(dir.path(), &["add", "app3", "metadata.internal:80"]);
    assert!(message.contains("is a host name"), "{message}");
}

#[test]
fn an_input_naming_an_address_outside_the_allowed_networks_is_not_written() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("input.json"), INPUT).expect("input written");
    let output = upcheck(
        dir.path(),
        &[
            "envoy",
            "input.json",
            "--membership",
            "-o",
            "envoy.yaml",
            "--allow",
            "10.0.0.0/8",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("upstreams[0].address: \"127.0.0.1:3001\" is outside"),
        "{}",
        stderr(&output)
    );
    assert!(!dir.path().join("envoy.yaml").exists());
}

#[test]
fn a_backend_at_the_balancers_own_admin_interface_is_refused_whatever_the_allowed_networks() {
    let dir = written(INPUT);
    let message = refused(dir.path(), &["add", "admin", "127.0.0.1:1"]);
    assert_eq!(
        message,
        "admin: address: \"127.0.0.1:1\" is the balancer's own listener (Envoy's admin interface)"
    );
    let message = refused(dir.path(), &["add", "page", "127.0.0.2:2"]);
    assert!(message.contains("(the status page)"), "{message}");
}

#[test]
fn an_unknown_name_is_refused_with_the_names_there_are() {
    let dir = written(INPUT);
    let message = refused(dir.path(), &["remove", "app9"]);
    assert_eq!(message, "app9: not a backend (the backends are app1, app2)");
}

#[test]
fn the_last_backend_is_removed_only_with_force_and_never_the_only_one() {
    let dir =
        written(r#"{"routing":"host","upstreams":[{"name":"app1","address":"127.0.0.1:3001"}]}"#);
    let message = refused(dir.path(), &["remove", "app1"]);
    assert!(
        message.starts_with("app1: the last backend in service"),
        "{message}"
    );
    let message = refused(dir.path(), &["remove", "app1", "--force"]);
    assert!(message.starts_with("app1: the only backend"), "{message}");
}

#[test]
fn a_file_upcheck_envoy_wrote_without_membership_is_refused() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("input.json"), INPUT).expect("input written");
    let output = upcheck(
        dir.path(),
        &["envoy", "input.json", "--static", "-o", "envoy.yaml"],
        b"",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    let message = refused(dir.path(), &["add", "app3", "127.0.0.1:3003"]);
    assert!(
        message.contains("not written by `upcheck envoy --membership -o envoy.yaml`"),
        "{message}"
    );
}

#[test]
fn a_change_while_another_runs_is_told_to_retry() {
    let dir = written(INPUT);
    fs::write(dir.path().join("envoy.yaml.d/.lock"), "1\n").expect("a lock");
    let message = refused(dir.path(), &["add", "app3", "127.0.0.1:3003"]);
    assert!(
        message.starts_with("another `upcheck backends` is changing these backends"),
        "{message}"
    );
}

#[test]
fn a_backend_added_back_under_a_removed_name_gets_a_cluster_and_so_a_state_of_its_own() {
    let dir = written(INPUT);
    let run = |args: &[&str]| {
        let mut all = vec!["backends", "--config", "envoy.yaml"];
        all.extend(args);
        let output = upcheck(dir.path(), &all, b"");
        assert!(output.status.success(), "{}", stderr(&output));
    };
    let clusters = || fs::read_to_string(dir.path().join("envoy.yaml.d/clusters.json")).unwrap();
    let plugin = || fs::read_to_string(dir.path().join("envoy.yaml.d/upcheck.json")).unwrap();
    run(&["remove", "app2"]);
    assert!(!plugin().contains("app2"), "{}", plugin());
    run(&["add", "app2", "127.0.0.1:3002"]);
    assert!(
        plugin().contains(r#"\"cluster\": \"app2-1\""#),
        "{}",
        plugin()
    );
    assert!(clusters().contains(r#""name": "app2-1""#), "{}", clusters());
    run(&["remove", "app2"]);
    run(&["add", "app2", "127.0.0.1:3002"]);
    assert!(
        plugin().contains(r#"\"cluster\": \"app2-2\""#),
        "{}",
        plugin()
    );
    assert!(
        !clusters().contains(r#""name": "app2-1""#),
        "{}",
        clusters()
    );
}

#[test]
fn a_drain_goes_into_the_filters_configuration_and_is_refused_twice_or_ended_where_none_is() {
    let dir = written(INPUT);
    let plugin = || fs::read_to_string(dir.path().join("envoy.yaml.d/upcheck.json")).unwrap();
    let clusters = fs::read(dir.path().join("envoy.yaml.d/clusters.json")).unwrap();
    assert_eq!(
        refused(dir.path(), &["drain", "app1", "--end"]),
        "app1: not drained by `upcheck backends drain`"
    );
    let output = upcheck(
        dir.path(),
        &["backends", "--config", "envoy.yaml", "drain", "app1"],
        b"",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(plugin().contains(r#"\"drain\": true"#), "{}", plugin());
    assert_eq!(
        fs::read(dir.path().join("envoy.yaml.d/clusters.json")).unwrap(),
        clusters,
        "a drain leaves the clusters as they are"
    );
    assert_eq!(
        refused(dir.path(), &["drain", "app1"]),
        "app1: already drained (`drain app1 --end` ends it)"
    );
    assert_eq!(
        refused(dir.path(), &["drain", "app9"]),
        "app9: not a backend (the backends are app1, app2)"
    );
    let output = upcheck(
        dir.path(),
        &[
            "backends",
            "--config",
            "envoy.yaml",
            "drain",
            "app1",
            "--end",
        ],
        b"",
    );
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(!plugin().contains("drain"), "{}", plugin());
}

#[test]
fn who_asked_and_why_are_refused_unless_plain_naming_the_option() {
    let dir = written(INPUT);
    assert_eq!(
        refused(dir.path(), &["drain", "app1", "--by", "alice smith"]),
        "--by \"alice smith\" has a character other than letters, digits and ._@:+-"
    );
    assert_eq!(
        refused(
            dir.path(),
            &["drain", "app1", "--reason", "sale\nforged line"]
        ),
        "--reason has a character that is not printable ASCII (a control character, a line \
         break, or beyond ASCII)"
    );
    let long = "r".repeat(201);
    assert_eq!(
        refused(dir.path(), &["drain", "app1", "--reason", &long]),
        "--reason is 201 characters long, over 200"
    );
}
