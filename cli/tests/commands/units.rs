//! `upcheck envoy -o FILE --units DIR`: the systemd units of a balancer, as `systemd-analyze
//! verify` reads them (offline: no systemd runs here, and nothing is started). `verify` insists
//! that each `ExecStart=` binary exists and is executable, so the units name stand-ins this test
//! creates for Envoy and `upcheck`; removing one makes `verify` fail, which shows the check is
//! live. `systemd-analyze` comes from `UPCHECK_SYSTEMD_ANALYZE` (`make commands` installs
//! Debian's `systemd` and sets it); the test fails without it.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{file_names, stderr, upcheck};

const INPUT: &str = r#"{"routing":"host","upstreams":[
    {"name":"app1","address":"10.0.0.1:3001"},{"name":"app2","address":"10.0.0.2:3002"}]}"#;

/// An executable stand-in at `path` (what `verify` checks of a command is that it exists and may
/// run).
fn stand_in(path: &Path) {
    fs::write(path, "#!/bin/sh\nexit 0\n").expect("a stand-in written");
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).expect("made executable");
}

/// A directory with `input.json`, stand-ins `bin/envoy` and `bin/upcheck`, and `units/`.
fn balancer() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    fs::write(dir.path().join("input.json"), INPUT).expect("input written");
    fs::create_dir(dir.path().join("bin")).expect("bin/");
    fs::create_dir(dir.path().join("units")).expect("units/");
    stand_in(&dir.path().join("bin/envoy"));
    stand_in(&dir.path().join("bin/upcheck"));
    dir
}

/// Runs `upcheck envoy input.json -o envoy.yaml --units units` with the stand-ins and `more` in
/// `dir`; it must exit 0.
fn written(dir: &Path, more: &[&str]) -> Output {
    let envoy = dir.join("bin/envoy");
    let upcheck_binary = dir.join("bin/upcheck");
    let mut args = vec![
        "envoy",
        "input.json",
        "-o",
        "envoy.yaml",
        "--units",
        "units",
        "--envoy-binary",
        envoy.to_str().expect("utf-8"),
        "--upcheck-binary",
        upcheck_binary.to_str().expect("utf-8"),
    ];
    args.extend(more);
    let output = upcheck(dir, &args, b"");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    output
}

/// The unit files written into `dir/units`, by name.
fn units(dir: &Path) -> Vec<String> {
    file_names(&dir.join("units"))
}

/// `systemd-analyze verify` on every unit in `dir/units`.
fn verify(dir: &Path) -> Output {
    let analyze = std::env::var_os("UPCHECK_SYSTEMD_ANALYZE")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .expect("UPCHECK_SYSTEMD_ANALYZE is not set: run this test through `make commands`");
    let paths: Vec<PathBuf> = units(dir)
        .iter()
        .map(|name| dir.join("units").join(name))
        .collect();
    let output = Command::new(&analyze)
        .arg("verify")
        .args(&paths)
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}", analyze.display()));
    println!(
        "$ systemd-analyze verify {}\n  exit {:?}; {:?}",
        units(dir).join(" "),
        output.status.code(),
        stderr(&output)
    );
    output
}

/// The line of `unit` in `dir/units` that starts with `key=`.
fn setting(dir: &Path, unit: &str, key: &str) -> Option<String> {
    let text = fs::read_to_string(dir.join("units").join(unit)).expect("the unit");
    text.lines()
        .find(|l| l.starts_with(&format!("{key}=")))
        .map(str::to_owned)
}

#[test]
fn the_units_of_a_fleets_balancer_pass_systemd_analyze_verify_and_fail_it_without_envoy() {
    let dir = balancer();
    written(
        dir.path(),
        &["--etcd", "10.0.0.5:2379", "--listen", "0.0.0.0:80"],
    );
    assert_eq!(
        units(dir.path()),
        ["upcheck-envoy.service", "upcheck-follow.service"]
    );
    let verified = verify(dir.path());
    assert_eq!(verified.status.code(), Some(0), "{}", stderr(&verified));
    assert_eq!(stderr(&verified), "", "verify warned");

    fs::remove_file(dir.path().join("bin/envoy")).expect("the stand-in removed");
    let refused = verify(dir.path());
    assert_ne!(refused.status.code(), Some(0));
    assert!(
        stderr(&refused).contains("upcheck-envoy.service: Command")
            && stderr(&refused).contains("is not executable"),
        "{}",
        stderr(&refused)
    );
}

#[test]
fn the_units_name_the_configuration_the_module_and_the_membership_by_absolute_paths() {
    let dir = balancer();
    written(dir.path(), &["--etcd", "10.0.0.5:2379"]);
    let root = fs::canonicalize(dir.path()).expect("the directory");
    // The configuration's path as the command's working directory names it.
    let config = root.join("envoy.yaml");
    assert_eq!(
        setting(dir.path(), "upcheck-envoy.service", "ExecStart"),
        Some(format!(
            "ExecStart={} -c {} --concurrency 2 --disable-hot-restart",
            dir.path().join("bin/envoy").display(),
            config.display()
        ))
    );
    assert_eq!(
        setting(dir.path(), "upcheck-follow.service", "ExecStart"),
        Some(format!(
            "ExecStart={} backends --config {} follow",
            dir.path().join("bin/upcheck").display(),
            config.display()
        ))
    );
    assert_eq!(
        setting(dir.path(), "upcheck-follow.service", "ReadWritePaths"),
        Some(format!("ReadWritePaths={}.d", config.display()))
    );
    assert!(
        root.join("envoy.yaml.d/membership.json").exists(),
        "the membership beside the file"
    );
    let head = fs::read_to_string(dir.path().join("units/upcheck-envoy.service")).expect("read");
    assert!(
        head.contains("/etc/upcheck/upcheck.wasm (--wasm)"),
        "{head}"
    );
    assert_eq!(
        setting(dir.path(), "upcheck-envoy.service", "CapabilityBoundingSet"),
        Some("CapabilityBoundingSet=".into()),
        "no capability at port 8080"
    );
    assert_eq!(
        setting(dir.path(), "upcheck-envoy.service", "User"),
        Some("User=upcheck".into())
    );
}

#[test]
fn a_balancer_alone_gets_envoys_unit_only_and_it_passes_verify() {
    let dir = balancer();
    written(dir.path(), &[]);
    assert_eq!(units(dir.path()), ["upcheck-envoy.service"]);
    let verified = verify(dir.path());
    assert_eq!(verified.status.code(), Some(0), "{}", stderr(&verified));
    assert_eq!(stderr(&verified), "", "verify warned");
}

#[test]
fn a_fleets_static_file_has_no_membership_to_follow_so_no_follower() {
    let dir = balancer();
    written(dir.path(), &["--etcd", "10.0.0.5:2379", "--static"]);
    assert_eq!(units(dir.path()), ["upcheck-envoy.service"]);
    assert!(!dir.path().join("envoy.yaml.d").exists());
}

#[test]
fn a_relative_module_path_is_refused_and_nothing_is_written() {
    let dir = balancer();
    let output = upcheck(
        dir.path(),
        &[
            "envoy",
            "input.json",
            "-o",
            "envoy.yaml",
            "--units",
            "units",
            "--wasm",
            "upcheck.wasm",
        ],
        b"",
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .starts_with("upcheck: --wasm upcheck.wasm: the units need the module's absolute path"),
        "{}",
        stderr(&output)
    );
    assert!(units(dir.path()).is_empty());
    assert!(!dir.path().join("envoy.yaml").exists());
}
