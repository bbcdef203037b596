//! Backends join and leave a running Envoy by `upcheck backends` (`upcheck_cli::membership`),
//! as an operator's panel would add app3 today: under 20 users a second on kept-alive
//! connections, in both routing modes. Three backends added broken (502 to everything, hanging,
//! nothing listening) take no user and cost none; the 502 one, fixed, takes users after its first
//! passing probe; a healthy backend drained takes no user once the command has returned, is still
//! probed, and takes users again once the drain ends; a healthy backend removed under traffic
//! costs nobody and sees no user once the command has returned; Envoy restarted on the same file
//! has the same backends.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use serde_json::{json, Value};
use tokio::time::sleep;
use upcheck_cli::membership::{self, Change, State};
use upcheck_e2e::envoy::{binary, module, Turn};
use upcheck_e2e::envoy_process::{EnvoyProcess, Launch};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::ports::free_addr;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

/// Envoy on `file`, once it serves.
async fn envoy(file: &Path, admin: std::net::SocketAddr) -> Result<EnvoyProcess> {
    let dir = file.parent().context("the file's directory")?;
    let mut process = EnvoyProcess::spawn(Launch {
        binary: binary()?,
        bootstrap: file,
        dir,
        concurrency: 2,
        cpu: None,
        args: &["--log-level", "info", "--file-flush-interval-msec", "100"],
    })?;
    if let Err(e) = process.until_ready(admin, Duration::from_millis(50)).await {
        anyhow::bail!("{e}: {}{}", process.log(), process.output());
    }
    Ok(process)
}

/// Runs `change` on `file` as the command does (it waits on Envoy, so off the runtime).
async fn run(file: &Path, change: Change) -> Result<Vec<String>> {
    let file = file.to_owned();
    let said = tokio::task::spawn_blocking(move || membership::change(&file, &change)).await?;
    said.map_err(|e| anyhow::anyhow!("{e:?}"))
}

fn drain(name: &str, drained: bool) -> Change {
    Change::Drain {
        name: name.into(),
        drained,
    }
}

fn add(name: &str, upstream: &FakeUpstream) -> Change {
    Change::Add {
        name: name.into(),
        address: upstream.addr().to_string(),
        weight: None,
    }
}

async fn backends_join_and_leave_a_running_balancer(routing: &str) -> Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let broken = [
        (
            "app3",
            FakeUpstream::start("app3", Mode::Status(502)).await?,
        ),
        ("app4", FakeUpstream::start("app4", Mode::Hang).await?),
        ("app5", FakeUpstream::start("app5", Mode::Refuse).await?),
    ];
    let _turn = Turn::one().await?;
    let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
    let file = dir.path().join("envoy.yaml");
    let (listen, admin, status) = (free_addr()?, free_addr()?, free_addr()?);
    let input = json!({
        "routing": routing,
        "upstreams": [
            {"name": "app1", "address": app1.addr().to_string()},
            {"name": "app2", "address": app2.addr().to_string()}
        ],
        "health_checks": {"active": {"uri": "/up", "interval": "1s", "timeout": "500ms"}}
    });
    let Value::Object(input) = input else {
        anyhow::bail!("the input is an object");
    };
    let state = State {
        input,
        probe_port: None,
        listen,
        admin,
        status,
        wasm: module()?.display().to_string(),
        concurrency: 2,
        written_from: "the membership test".into(),
        removed: Default::default(),
    };
    membership::write(&file, &state).map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let mut process = envoy(&file, admin).await?;

    let replay = Replay::new(format!("http://{listen}/"), 20, Duration::from_secs(17));
    let traffic = tokio::spawn(async move { replay.run().await });
    sleep(Duration::from_millis(1500)).await;
    let mut added_at = Instant::now();
    for (name, upstream) in &broken {
        if *name == "app3" {
            added_at = Instant::now();
        }
        let said = run(&file, add(name, upstream)).await?;
        println!("{routing} routing: {}", said.join("; "));
    }
    sleep(Duration::from_secs(4)).await;
    for (name, upstream) in &broken {
        let counts = upstream.counts();
        ensure!(
            counts.requests == 0,
            "{name} took users while broken: {counts:?}"
        );
    }
    ensure!(
        broken[0].1.counts().probes >= 2,
        "app3 is probed: {:?}",
        broken[0].1.counts()
    );

    broken[0].1.set_mode(Mode::Ok);
    let fixed_at = Instant::now();
    while broken[0].1.counts().requests == 0 {
        ensure!(
            fixed_at.elapsed() < Duration::from_secs(5),
            "fixed app3 took no user"
        );
        sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{routing} routing: app3 fixed {:.1} s after it was added took its first user {:.1} s \
         after the fix ({:.1} s after `add`)",
        (fixed_at - added_at).as_secs_f64(),
        fixed_at.elapsed().as_secs_f64(),
        added_at.elapsed().as_secs_f64()
    );

    let said = run(&file, drain("app1", true)).await?;
    println!("{routing} routing: {}", said.join("; "));
    let (drained, probed) = (app1.counts().requests, app1.counts().probes);
    sleep(Duration::from_millis(1500)).await;
    ensure!(
        app1.counts().requests == drained,
        "app1 took users after `drain` returned: {drained} then {}",
        app1.counts().requests
    );
    ensure!(
        app1.counts().probes > probed,
        "a drained app1 is still probed"
    );
    let said = run(&file, drain("app1", false)).await?;
    let ended = Instant::now();
    while app1.counts().requests == drained {
        ensure!(
            ended.elapsed() < Duration::from_secs(3),
            "app1 took no user once its drain ended"
        );
        sleep(Duration::from_millis(20)).await;
    }
    println!(
        "{routing} routing: {}; its first user {:.2} s later",
        said.join("; "),
        ended.elapsed().as_secs_f64()
    );

    let removing = Instant::now();
    let said = run(
        &file,
        Change::Remove {
            name: "app2".into(),
            timeout: Duration::from_secs(30),
            force: false,
        },
    )
    .await?;
    let after_remove = app2.counts().requests;
    println!(
        "{routing} routing: {} ({:.1} s)",
        said.join("; "),
        removing.elapsed().as_secs_f64()
    );
    let report = traffic.await??;
    println!("{routing} routing: {report}");
    ensure!(report.failures() == 0, "{report}");
    ensure!(
        app2.counts().requests == after_remove,
        "app2 took users after `remove` returned: {} then {}",
        after_remove,
        app2.counts().requests
    );
    for (name, upstream) in &broken[1..] {
        ensure!(upstream.counts().requests == 0, "{name} took users");
    }

    process.kill();
    let _process = envoy(&file, admin).await?;
    let listed = tokio::task::spawn_blocking({
        let file = file.clone();
        move || membership::list(&file)
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    let names: Vec<&str> = listed
        .iter()
        .filter_map(|line| line.split('\t').next())
        .collect();
    ensure!(
        names == ["app1", "app3", "app4", "app5"],
        "restarted: {listed:#?}"
    );
    Ok(())
}

#[tokio::test]
async fn backends_join_and_leave_a_running_balancer_in_host_routing() -> Result<()> {
    backends_join_and_leave_a_running_balancer("host").await
}

#[tokio::test]
async fn backends_join_and_leave_a_running_balancer_in_cluster_routing() -> Result<()> {
    backends_join_and_leave_a_running_balancer("cluster").await
}
