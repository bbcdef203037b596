//! The steps of docs/moving-from-caddy.md and the README's "Deploy in five steps", run as
//! written, from Caddy's JSON to a running Envoy, then as a new operator goes on: a backend added,
//! serving, removed, with Envoy restarted in between.
//!
//! `config/caddy.json` stands for `curl -s localhost:2019/config/` (no Caddy runs here); its copy
//! dials two fake upstreams on loopback instead of 127.0.0.1:3001 and :3002. The built `upcheck`
//! writes `envoy.yaml` (the default shape, its backends in `envoy.yaml.d/`) with the listener,
//! admin and status page listener on free loopback ports, `envoy --mode validate -c envoy.yaml`
//! accepts it, and Envoy runs it with two workers. Then the README's last two steps: the status
//! page lists both backends in rotation and healthy, the admin's stats show the probes, and user
//! requests reach both backends. Then `upcheck backends --config envoy.yaml add app3`: app3
//! serves; Envoy restarted on the file still has it; `remove app3`: no user reaches it, and Envoy
//! restarted again has app1 and app2 only. Each step prints what it did. Envoy comes from
//! `UPCHECK_ENVOY`, the module from `UPCHECK_WASM` (`make e2e` sets both); the test fails
//! without them.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context};
use tokio::time::{sleep, Instant};
use upcheck_e2e::caddy::{dialling, operators_caddy_json, write_envoy_yaml_with, Written};
use upcheck_e2e::envoy::{binary, ConfigPorts, Envoy, Turn};
use upcheck_e2e::envoy_process::{EnvoyProcess, Launch, PORT_ATTEMPTS};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::RATE;
use upcheck_e2e::ports::free_addr;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// How long Envoy has to probe both backends once: it probes when it starts.
const FIRST_PROBES: Duration = Duration::from_secs(15);

/// `envoy --mode validate -c envoy.yaml` in `dir`: Ok, or what Envoy said.
fn validate(dir: &Path) -> anyhow::Result<()> {
    let binary = std::env::var_os("UPCHECK_ENVOY")
        .filter(|v| !v.is_empty())
        .context("UPCHECK_ENVOY is not set: run this test through `make e2e`")?;
    let output = Command::new(&binary)
        .args(["--mode", "validate", "-c", "envoy.yaml"])
        .current_dir(dir)
        .output()
        .with_context(|| format!("cannot run {binary:?}"))?;
    ensure!(
        output.status.success(),
        "envoy --mode validate -c envoy.yaml refused it:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(())
}

/// Whether the text status page shows `name` in rotation, healthy, with a passed probe.
fn in_and_healthy(page: &str, name: &str) -> bool {
    page.lines().any(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        words.starts_with(&[name, "in", "healthy"]) && line.contains("last probe passed")
    })
}

/// `curl -s 127.0.0.1:<status>/upcheck/status` until both backends are in and healthy: the page.
async fn status_page_once_probed(envoy: &Envoy) -> anyhow::Result<String> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let deadline = Instant::now() + FIRST_PROBES;
    loop {
        let response = http
            .get(envoy.status_url("/upcheck/status")?)
            .send()
            .await?;
        let status = response.status();
        let page = response.text().await?;
        ensure!(status == 200, "/upcheck/status answered {status}: {page}");
        if in_and_healthy(&page, "app1") && in_and_healthy(&page, "app2") {
            return Ok(page);
        }
        ensure!(
            Instant::now() < deadline,
            "after {FIRST_PROBES:?} the status page still says:\n{page}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn the_readme_steps_take_caddys_json_to_an_envoy_that_probes_and_serves_both_backends(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let started = Instant::now();
    let caddy = std::fs::read_to_string(operators_caddy_json())?;
    let dialled = dialling(&caddy, [app1.addr(), app2.addr()])?;
    // The default shape: Envoy reads the backends from envoy.yaml.d/, which must outlive it.
    let mut written = None;
    let envoy = Envoy::builder()
        .concurrency(2)
        .start_yaml(|ports| {
            let written = written.insert(write_envoy_yaml_with(
                Path::new(env!("CARGO_BIN_EXE_upcheck")),
                &dialled,
                ports,
                &[],
            )?);
            validate(written.dir.path())?;
            written.yaml()
        })
        .await?;
    let written = written.context("Envoy started without its configuration written")?;
    ensure!(
        written
            .dir
            .path()
            .join("envoy.yaml.d/membership.json")
            .exists(),
        "`upcheck envoy -o envoy.yaml` wrote no membership beside the file"
    );
    println!("written, validated and ready in {:?}", started.elapsed());

    let page = status_page_once_probed(&envoy).await?;
    println!("/upcheck/status after {:?}:\n{page}", started.elapsed());

    let stats = envoy.stats("wasmcustom.upcheck").await?;
    println!("/stats?filter=wasmcustom.upcheck: {stats:?}");
    for name in ["app1", "app2"] {
        let stat = |what: &str| {
            stats
                .get(&format!("wasmcustom.upcheck.{name}.{what}"))
                .copied()
        };
        assert!(stat("probes") >= Some(1), "{name} probed: {stats:?}");
        assert_eq!(stat("probe_failures"), Some(0), "{stats:?}");
        assert_eq!(stat("healthy"), Some(1), "{stats:?}");
    }

    let prometheus = envoy.admin("/stats/prometheus?filter=upcheck").await?;
    for line in [
        "# TYPE upcheck_probes counter",
        "# TYPE upcheck_probe_failures counter",
        "upcheck_probe_failures{backend=\"app2\"} 0",
        "# TYPE upcheck_healthy gauge",
        "upcheck_healthy{backend=\"app1\"} 1",
        "upcheck_healthy{backend=\"app2\"} 1",
        "upcheck_state{backend=\"app2\",state=\"healthy\"} 1",
        "upcheck_state{backend=\"app2\",state=\"unknown\"} 0",
        "upcheck_pool_guard{} 0",
    ] {
        assert!(
            prometheus.lines().any(|l| l == line),
            "/stats/prometheus has no line {line:?}:\n{prometheus}"
        );
    }

    let report = Replay::new(envoy.url("/"), RATE, Duration::from_secs(1))
        .connection_per_request()
        .run()
        .await?;
    let (one, two) = (app1.counts(), app2.counts());
    println!("users: {report}; app1 {one:?}, app2 {two:?}");
    assert_eq!(report.failures(), 0, "{report}");
    envoy
        .ensure_attempts(one.requests + two.requests, u64::from(RATE))
        .await?;
    assert!(one.requests > 0 && two.requests > 0, "{one:?} {two:?}");
    Ok(())
}

/// `envoy -c envoy.yaml --concurrency 2` where `written` is, as the README's fifth step runs
/// it, once it is ready.
async fn envoy_on(written: &Written) -> anyhow::Result<EnvoyProcess> {
    let file = written.path();
    let mut process = EnvoyProcess::spawn(Launch {
        binary: binary()?,
        bootstrap: &file,
        dir: written.dir.path(),
        concurrency: 2,
        cpu: None,
        args: &["--file-flush-interval-msec", "100"],
        env: &[],
    })?;
    if let Err(e) = process
        .until_ready(written.ports.admin, Duration::from_millis(50))
        .await
    {
        bail!("{e}: {}{}", process.log(), process.output());
    }
    Ok(process)
}

/// `upcheck envoy --from-caddy caddy.json -o envoy.yaml` (the default) on free ports, and Envoy
/// started on it; written and started again on other ports when another process took one.
async fn written_and_started(dialled: &str) -> anyhow::Result<(Written, EnvoyProcess)> {
    let mut attempt = 1;
    loop {
        let ports = ConfigPorts {
            listener: free_addr()?,
            admin: free_addr()?,
            status: free_addr()?,
        };
        let upcheck = Path::new(env!("CARGO_BIN_EXE_upcheck"));
        let written = write_envoy_yaml_with(upcheck, dialled, &ports, &[])?;
        match envoy_on(&written).await {
            Err(e)
                if attempt < PORT_ATTEMPTS && e.to_string().contains("Address already in use") =>
            {
                attempt += 1;
            }
            started => return Ok((written, started?)),
        }
    }
}

/// Runs `upcheck args` where `written` is, off the runtime (it waits on Envoy, whose probes the
/// fake backends on this runtime answer), and prints it as the operator saw it; what it printed,
/// or an error unless it exited 0.
async fn operator(written: &Written, args: &[&str]) -> anyhow::Result<String> {
    let dir = written.dir.path().to_owned();
    let owned: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_upcheck"))
            .args(&owned)
            .current_dir(dir)
            .output()
    })
    .await??;
    let said = String::from_utf8_lossy(&output.stdout).into_owned();
    println!("$ upcheck {}", args.join(" "));
    for line in said
        .lines()
        .chain(String::from_utf8_lossy(&output.stderr).lines())
    {
        println!("  {line}");
    }
    ensure!(
        output.status.success(),
        "upcheck {}: {}",
        args.join(" "),
        output.status
    );
    Ok(said)
}

/// The status page, once every backend of `names` is in and healthy (within [`FIRST_PROBES`]).
async fn page_with(written: &Written, names: &[&str]) -> anyhow::Result<String> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("http://{}/upcheck/status", written.ports.status);
    let deadline = Instant::now() + FIRST_PROBES;
    loop {
        let page = http.get(&url).send().await?.text().await?;
        if names.iter().all(|name| in_and_healthy(&page, name)) {
            return Ok(page);
        }
        ensure!(
            Instant::now() < deadline,
            "after {FIRST_PROBES:?} the status page still says:\n{page}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

/// The backends the status page lists, by name.
fn listed(page: &str) -> Vec<String> {
    page.lines()
        .filter(|line| line.starts_with("app"))
        .filter_map(|line| line.split_whitespace().next().map(str::to_owned))
        .collect()
}

/// Sends users one at a time until `upstream` has answered one (within [`FIRST_PROBES`]); how
/// many were sent. Every one must be answered 200.
async fn until_served_by(written: &Written, upstream: &FakeUpstream) -> anyhow::Result<u32> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("http://{}/", written.ports.listener);
    let deadline = Instant::now() + FIRST_PROBES;
    let mut sent = 0;
    while upstream.counts().requests == 0 {
        ensure!(
            Instant::now() < deadline,
            "{} took no user in {FIRST_PROBES:?} ({sent} sent)",
            upstream.name()
        );
        let status = http.get(&url).send().await?.status();
        sent += 1;
        ensure!(status == 200, "user {sent}: {status}");
        sleep(Duration::from_millis(50)).await;
    }
    Ok(sent)
}

/// Sends `count` users; each must be answered 200.
async fn users(written: &Written, count: u32) -> anyhow::Result<()> {
    let http = reqwest::Client::builder().no_proxy().build()?;
    let url = format!("http://{}/", written.ports.listener);
    for user in 1..=count {
        let status = http.get(&url).send().await?.status();
        ensure!(status == 200, "user {user} of {count}: {status}");
    }
    Ok(())
}

#[tokio::test]
async fn a_new_operator_adds_a_backend_to_the_default_file_and_removes_it_and_envoy_restarted_keeps_each_change(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let app3 = FakeUpstream::start("app3", Mode::Ok).await?;
    let _turn = Turn::one().await?;
    let caddy = std::fs::read_to_string(operators_caddy_json())?;
    let dialled = dialling(&caddy, [app1.addr(), app2.addr()])?;

    let (written, mut envoy) = written_and_started(&dialled).await?;
    let mut files: Vec<String> = std::fs::read_dir(written.dir.path().join("envoy.yaml.d"))?
        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
        .collect::<std::io::Result<_>>()?;
    files.sort();
    println!(
        "$ upcheck envoy --from-caddy caddy.json -o envoy.yaml (ports {:?})\n  wrote \
         envoy.yaml and envoy.yaml.d/{{{}}}",
        written.ports,
        files.join(", ")
    );
    println!(
        "$ envoy -c envoy.yaml --concurrency 2\n  ready (pid {})",
        envoy.pid()
    );
    let page = page_with(&written, &["app1", "app2"]).await?;
    println!("status page:\n{page}");

    let app3_at = app3.addr().to_string();
    let said = operator(
        &written,
        &[
            "backends",
            "--config",
            "envoy.yaml",
            "add",
            "app3",
            &app3_at,
        ],
    )
    .await?;
    ensure!(said.starts_with("app3 added at "), "{said}");
    let sent = until_served_by(&written, &app3).await?;
    println!("users: app3 answered one after {sent} sent, all 200");

    envoy.kill();
    let mut envoy = envoy_on(&written).await?;
    println!(
        "Envoy killed and started again on envoy.yaml (pid {})",
        envoy.pid()
    );
    let page = page_with(&written, &["app1", "app2", "app3"]).await?;
    println!("status page after the restart:\n{page}");
    let before = app3.counts().requests;
    users(&written, 30).await?;
    ensure!(
        app3.counts().requests > before,
        "app3 took none of 30 users after the restart"
    );
    println!(
        "users: 30 sent, all 200; app3 answered {}",
        app3.counts().requests - before
    );

    let said = operator(
        &written,
        &["backends", "--config", "envoy.yaml", "remove", "app3"],
    )
    .await?;
    ensure!(said.starts_with("app3 removed: no new requests"), "{said}");
    let before = app3.counts().requests;
    users(&written, 30).await?;
    ensure!(
        app3.counts().requests == before,
        "app3 took users after `remove` returned"
    );
    println!("users: 30 sent after `remove`, all 200; app3 answered none");

    envoy.kill();
    let envoy = envoy_on(&written).await?;
    println!(
        "Envoy killed and started again on envoy.yaml (pid {})",
        envoy.pid()
    );
    let page = page_with(&written, &["app1", "app2"]).await?;
    println!("status page after the second restart:\n{page}");
    ensure!(listed(&page) == ["app1", "app2"], "{page}");
    let said = operator(&written, &["backends", "--config", "envoy.yaml", "list"]).await?;
    let names: Vec<&str> = said
        .lines()
        .filter_map(|line| line.split('\t').next())
        .collect();
    ensure!(names == ["app1", "app2"], "{said}");
    users(&written, 30).await?;
    ensure!(
        app3.counts().requests == before,
        "app3 took users after the restart"
    );
    println!("users: 30 sent, all 200; app3 answered none");
    Ok(())
}
