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
use upcheck_cli::etcd_membership;
use upcheck_cli::membership::{self, Change, State};
use upcheck_e2e::envoy::{binary, module, Turn};
use upcheck_e2e::envoy_process::{EnvoyProcess, Launch, PORT_ATTEMPTS};
use upcheck_e2e::etcd::{plugin, Etcd};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::ports::free_addr;
use upcheck_e2e::raw_http::status_of;
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
        env: &[],
    })?;
    if let Err(e) = process.until_ready(admin, Duration::from_millis(50)).await {
        anyhow::bail!("{e}: {}{}", process.log(), process.output());
    }
    Ok(process)
}

/// FILE written as `upcheck envoy --membership` writes it for `input` (a plugin
/// configuration), with users, Envoy's admin interface and the status page at `ports`, the
/// fleet's `etcd` if any, and the networks `allowed`.
fn write(
    file: &Path,
    input: Value,
    [listen, admin, status]: [std::net::SocketAddr; 3],
    etcd: Option<upcheck_cli::etcd::Etcd>,
    allowed: &[&str],
) -> Result<()> {
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
        etcd,
        allowed: allowed
            .iter()
            .map(|net| net.parse())
            .collect::<Result<_, _>>()?,
        history: Vec::new(),
    };
    membership::write(file, &state).map_err(|e| anyhow::anyhow!("{e:?}"))
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
    let input = json!({
        "routing": routing,
        "upstreams": [
            {"name": "app1", "address": app1.addr().to_string()},
            {"name": "app2", "address": app2.addr().to_string()}
        ],
        "health_checks": {"active": {"uri": "/up", "interval": "1s", "timeout": "500ms"}}
    });
    let (mut process, [listen, admin, _]) = serve(&file, &input, None, &[]).await?;

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

    // A client naming Envoy's admin interface in the routing header reaches a backend, once
    // the restarted Envoy serves users.
    let serving = Instant::now();
    while status_of(listen, &[]).await.ok() != Some(200) {
        ensure!(
            serving.elapsed() < Duration::from_secs(15),
            "the restarted Envoy never served"
        );
        sleep(Duration::from_millis(100)).await;
    }
    let served = || app1.counts().requests + broken[0].1.counts().requests;
    let before = served();
    let naming_admin = [
        format!("x-upcheck-upstream: {admin}"),
        format!("X-Upcheck-Upstream: {admin}"),
    ];
    for header in &naming_admin {
        for _ in 0..5 {
            let status = status_of(listen, &[header.as_str()]).await?;
            ensure!(status == 200, "{header}: {status}");
        }
    }
    ensure!(
        served() - before == 10,
        "{routing} routing: of 10 requests naming the admin interface, {} reached a backend",
        served() - before
    );
    ensure!(
        app1.counts().with_routing_header + broken[0].1.counts().with_routing_header == 0,
        "a backend saw the routing header"
    );
    Ok(())
}

/// Writes `file` from `input` on free ports (users, admin, status page) and starts Envoy on it:
/// written and started again on other ports when another process took one first, up to
/// [`PORT_ATTEMPTS`] times in all.
async fn serve(
    file: &Path,
    input: &Value,
    etcd: Option<upcheck_cli::etcd::Etcd>,
    allowed: &[&str],
) -> Result<(EnvoyProcess, [std::net::SocketAddr; 3])> {
    let mut attempt = 1;
    loop {
        let ports = [free_addr()?, free_addr()?, free_addr()?];
        write(file, input.clone(), ports, etcd.clone(), allowed)?;
        match envoy(file, ports[1]).await {
            Err(e)
                if attempt < PORT_ATTEMPTS && e.to_string().contains("Address already in use") =>
            {
                eprintln!("attempt {attempt}: a port was taken; starting Envoy on other ports");
                attempt += 1;
            }
            started => return started.map(|process| (process, ports)),
        }
    }
}

#[tokio::test]
async fn backends_join_and_leave_a_running_balancer_in_host_routing() -> Result<()> {
    backends_join_and_leave_a_running_balancer("host").await
}

#[tokio::test]
async fn backends_join_and_leave_a_running_balancer_in_cluster_routing() -> Result<()> {
    backends_join_and_leave_a_running_balancer("cluster").await
}

/// A balancer of a fleet: FILE written as `upcheck envoy --etcd … --membership` writes it for
/// `upstreams`, its Envoy, and its follower (`upcheck backends --config FILE follow`) on a
/// thread of its own, whose lines the test prints.
struct FleetBalancer {
    file: std::path::PathBuf,
    listen: std::net::SocketAddr,
    /// Its status page's listener.
    status: std::net::SocketAddr,
    name: String,
    _envoy: EnvoyProcess,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    follower: Option<std::thread::JoinHandle<()>>,
    /// Every line its follower said.
    said: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
}

impl FleetBalancer {
    async fn start(name: &str, etcd: &Etcd, upstreams: &[&FakeUpstream]) -> Result<FleetBalancer> {
        FleetBalancer::start_with(name, etcd, json!({"cluster": "etcd"}), upstreams).await
    }

    /// [`FleetBalancer::start`] with `fleet` as the plugin configuration's fleet object, and
    /// reaching `etcd` over TLS with the balancers' certificate when it runs TLS.
    async fn start_with(
        name: &str,
        etcd: &Etcd,
        fleet: Value,
        upstreams: &[&FakeUpstream],
    ) -> Result<FleetBalancer> {
        let dir = tempfile::Builder::new().prefix("upcheck-e2e-").tempdir()?;
        let file = dir.path().join("envoy.yaml");
        let etcd = upcheck_cli::etcd::Etcd {
            cluster: "etcd".into(),
            members: etcd.clients(),
            tls: etcd
                .tls_flags()
                .tls(true)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            watch_cluster: None,
        };
        let input = plugin(upstreams, Some(fleet));
        let (envoy, [listen, _, status]) =
            serve(&file, &input, Some(etcd), &["127.0.0.0/8"]).await?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let said = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let follower = std::thread::spawn({
            let (file, stop, name) = (file.clone(), stop.clone(), name.to_owned());
            let heard = said.clone();
            move || {
                let said = etcd_membership::follow(&file, &name, &stop, |line| {
                    println!("{name} follower: {line}");
                    if let Ok(mut heard) = heard.lock() {
                        heard.push(line.to_owned());
                    }
                });
                if let Err(e) = said {
                    println!("{name} follower stopped: {e:?}");
                }
            }
        });
        Ok(FleetBalancer {
            file,
            listen,
            status,
            name: name.to_owned(),
            _envoy: envoy,
            stop,
            follower: Some(follower),
            said,
            _dir: dir,
        })
    }

    /// Whether its follower said a line for which `wanted` holds.
    fn said(&self, wanted: impl Fn(&str) -> bool) -> bool {
        self.said
            .lock()
            .is_ok_and(|lines| lines.iter().any(|l| wanted(l)))
    }

    /// What its follower last reported to etcd, once it has reported.
    async fn report(&self, etcd: &Etcd) -> Result<Option<Value>> {
        let key = format!("upcheck/v1/applied/{}", self.name);
        let found = etcd
            .range(&key)
            .await?
            .into_iter()
            .find(|(k, ..)| *k == key);
        Ok(found.and_then(|(_, v, _)| serde_json::from_slice(&v).ok()))
    }
}

impl Drop for FleetBalancer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(follower) = self.follower.take() {
            let _ = follower.join();
        }
    }
}

/// Backends join and leave a fleet of three balancers by one command on any of them: it
/// reaches every balancer (each one's time printed), one started afterwards reads it, a
/// broken backend added takes no user anywhere, and a removal drains on every balancer before
/// it returns, then deletes the keys the balancers kept of it.
#[tokio::test]
async fn one_command_changes_the_backends_of_every_balancer_of_a_fleet() -> Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let app3 = FakeUpstream::start("app3", Mode::Status(502)).await?;
    let etcd = Etcd::start(1).await?;
    let a = FleetBalancer::start("lb-a", &etcd, &[&app1, &app2]).await?;
    let b = FleetBalancer::start("lb-b", &etcd, &[&app1, &app2]).await?;
    let waiting = Instant::now();
    while a.report(&etcd).await?.is_none() || b.report(&etcd).await?.is_none() {
        ensure!(
            waiting.elapsed() < Duration::from_secs(10),
            "the followers never reported"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let users = |balancer: &FleetBalancer| {
        let replay = Replay::new(
            format!("http://{}/", balancer.listen),
            10,
            Duration::from_secs(14),
        );
        tokio::spawn(async move { replay.run().await })
    };
    let (traffic_a, traffic_b) = (users(&a), users(&b));
    sleep(Duration::from_millis(1000)).await;

    let said = run(&a.file, add("app3", &app3)).await?;
    println!("add app3 (502) on lb-a: {}", said.join("; "));
    for balancer in ["lb-a", "lb-b"] {
        ensure!(
            said.iter()
                .any(|l| l.starts_with(balancer) && l.contains("in force after")),
            "{balancer} did not take the change in: {said:?}"
        );
    }
    let c = FleetBalancer::start("lb-c", &etcd, &[&app1, &app2]).await?;
    let started = Instant::now();
    loop {
        let listed = c.report(&etcd).await?.unwrap_or_default();
        let names: Vec<&str> = listed["backends"]
            .as_array()
            .map(|b| b.iter().filter_map(|b| b["name"].as_str()).collect())
            .unwrap_or_default();
        if names == ["app1", "app2", "app3"] {
            break;
        }
        ensure!(
            started.elapsed() < Duration::from_secs(10),
            "lb-c never read app3: {listed}"
        );
        sleep(Duration::from_millis(20)).await;
    }
    println!(
        "lb-c, started after the change, had app3 in force {} ms after its Envoy was ready",
        started.elapsed().as_millis()
    );
    sleep(Duration::from_secs(2)).await;
    ensure!(
        app3.counts().requests == 0,
        "a broken app3 took users: {:?}",
        app3.counts()
    );
    ensure!(
        app3.counts().probes >= 2,
        "app3 is probed: {:?}",
        app3.counts()
    );

    app3.set_mode(Mode::Ok);
    let fixed = Instant::now();
    while app3.counts().requests == 0 {
        ensure!(
            fixed.elapsed() < Duration::from_secs(5),
            "a fixed app3 took no user"
        );
        sleep(Duration::from_millis(20)).await;
    }
    println!(
        "app3 fixed took its first user {:.1} s later",
        fixed.elapsed().as_secs_f64()
    );

    let removing = Instant::now();
    let said = run(
        &b.file,
        Change::Remove {
            name: "app1".into(),
            timeout: Duration::from_secs(10),
            force: false,
        },
    )
    .await?;
    let after_remove = app1.counts().requests;
    println!(
        "remove app1 on lb-b ({:.1} s): {}",
        removing.elapsed().as_secs_f64(),
        said.join("; ")
    );
    for balancer in ["lb-a", "lb-b", "lb-c"] {
        ensure!(
            said.iter()
                .any(|l| l.starts_with(balancer) && l.contains("none of app1's requests")),
            "{balancer} did not drain app1 first: {said:?}"
        );
    }
    let (report_a, report_b) = (traffic_a.await??, traffic_b.await??);
    println!("users through lb-a: {report_a}; through lb-b: {report_b}");
    ensure!(
        report_a.failures() + report_b.failures() == 0,
        "users failed"
    );
    ensure!(
        app1.counts().requests == after_remove,
        "app1 took users after `remove` returned: {after_remove} then {}",
        app1.counts().requests
    );
    let kept: Vec<String> = etcd
        .range("upcheck/v1/")
        .await?
        .into_iter()
        .map(|(k, ..)| k)
        .filter(|k| {
            k.rsplit('/')
                .next()
                .is_some_and(|last| last.starts_with("app1@"))
        })
        .collect();
    ensure!(kept.is_empty(), "keys of a removed app1 remain: {kept:?}");
    let listed = tokio::task::spawn_blocking({
        let file = c.file.clone();
        move || membership::list(&file)
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    println!("list on lb-c:\n{}", listed.join("\n"));
    ensure!(
        listed.iter().all(|l| !l.contains("\tapp1\t")),
        "app1 still listed: {listed:#?}"
    );

    // Whoever can write etcd cannot aim the fleet outside its balancers' --allow networks.
    let hostile = json!({"kind": "membership/v1", "upstreams": [
        {"name": "app2", "address": app2.addr().to_string()},
        {"name": "metadata", "address": "169.254.169.254:80"}
    ]});
    etcd.put("upcheck/v1/membership", hostile.to_string().as_bytes())
        .await?;
    sleep(Duration::from_millis(1500)).await;
    for balancer in [&a, &b, &c] {
        let report = balancer.report(&etcd).await?.unwrap_or_default();
        let names: Vec<&str> = report["backends"]
            .as_array()
            .map(|b| b.iter().filter_map(|b| b["name"].as_str()).collect())
            .unwrap_or_default();
        ensure!(
            names == ["app2", "app3"],
            "{} took a membership outside its networks in: {report}",
            balancer.name
        );
    }
    Ok(())
}

/// A fleet on TLS with a client certificate required and both roles of
/// `upcheck_cli::etcd_roles`: the follower reaches etcd with the balancers' certificate and
/// role, takes in the operator's change (made with the operator's own certificate and user),
/// and logs who asked and why; a membership whose change record a hostile writer forged (a line
/// break in the reason, to forge a log line) is refused by the follower, its backends as they
/// were.
#[tokio::test]
async fn a_follower_on_tls_logs_who_changed_the_membership_and_why_and_refuses_a_forged_record(
) -> Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let app3 = FakeUpstream::start("app3", Mode::Ok).await?;
    let mut etcd = Etcd::start_tls(1).await?;
    let certificates = etcd.certificates().context("TLS is on")?.clone();
    let operator = certificates.another_client("operator")?;
    etcd.enable_roles(&[
        (
            "balancer",
            "balancers-secret",
            "upcheck-balancer",
            upcheck_cli::etcd_roles::balancers("upcheck"),
        ),
        (
            "operator",
            "operators-secret",
            "upcheck-operator",
            upcheck_cli::etcd_roles::operators("upcheck"),
        ),
    ])
    .await?;
    let fleet = json!({"cluster": "etcd", "user": "balancer", "password": "balancers-secret"});
    let a = FleetBalancer::start_with("lb-a", &etcd, fleet, &[&app1, &app2]).await?;
    let waiting = Instant::now();
    while a.report(&etcd).await?.is_none() {
        ensure!(
            waiting.elapsed() < Duration::from_secs(10),
            "the follower never reported over TLS"
        );
        sleep(Duration::from_millis(50)).await;
    }
    // The module's own writes, as user balancer, are within the balancers' role.
    let waiting = Instant::now();
    loop {
        let keys: Vec<String> = etcd
            .range("upcheck/v1/")
            .await?
            .into_iter()
            .map(|(k, ..)| k)
            .collect();
        let written = |kind: &str| keys.iter().any(|k| k.starts_with(kind));
        if written("upcheck/v1/balancers/")
            && written("upcheck/v1/duty/")
            && written("upcheck/v1/active/")
        {
            break;
        }
        ensure!(
            waiting.elapsed() < Duration::from_secs(10),
            "the balancers' role kept the module from writing its keys: {keys:?}"
        );
        sleep(Duration::from_millis(100)).await;
    }
    let alice = membership::Operator {
        by: "alice@ops-1".into(),
        reason: Some("more capacity for the sale".into()),
        access: membership::Access {
            cert: Some(upcheck_cli::etcd::ClientCertificate {
                cert: operator.cert.clone(),
                key: operator.key.clone(),
            }),
            user: Some(upcheck_cli::etcd_client::Credentials {
                user: "operator".into(),
                password: "operators-secret".into(),
            }),
        },
    };
    let said = tokio::task::spawn_blocking({
        let (file, change) = (a.file.clone(), add("app3", &app3));
        move || membership::change_as(&file, &change, &alice)
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e:?}"))?;
    println!("add app3 as the operator: {}", said.join("; "));
    ensure!(
        said.iter()
            .any(|l| l.starts_with("lb-a") && l.contains("in force after")),
        "lb-a did not take the change in: {said:?}"
    );
    let logged = |l: &str| {
        l.contains("app3")
            && l.contains(&format!("(app3 add {} by alice@ops-1 at ", app3.addr()))
            && l.ends_with(" UTC: more capacity for the sale)")
    };
    ensure!(
        a.said(logged),
        "the follower's log line does not say who asked and why"
    );
    let page = reqwest::get(format!("http://{}/upcheck/status.json", a.status))
        .await?
        .text()
        .await?;
    let page: Value = serde_json::from_str(&page)?;
    let app3_row = page["backends"]
        .as_array()
        .and_then(|b| b.iter().find(|b| b["name"] == "app3"))
        .cloned()
        .unwrap_or_default();
    let shown = app3_row["last_change"].as_str().unwrap_or_default();
    println!("the status page's app3: last change {shown:?}");
    ensure!(
        shown.starts_with(&format!("add {} by alice@ops-1 at ", app3.addr()))
            && shown.ends_with(" UTC: more capacity for the sale"),
        "the status page does not say who asked and why: {app3_row}"
    );

    let forged = json!({"kind": "membership/v1",
        "upstreams": [{"name": "app2", "address": app2.addr().to_string()}],
        "history": [{"at": 1, "backend": "app1", "what": "remove", "by": "root",
                     "reason": "ok\nrevision 9: backends app2: in force"}]});
    etcd.put("upcheck/v1/membership", forged.to_string().as_bytes())
        .await?;
    let waiting = Instant::now();
    while !a.said(|l| l.contains("refused, the backends stay as they are: history[0].reason")) {
        ensure!(
            waiting.elapsed() < Duration::from_secs(5),
            "the follower did not refuse a forged record"
        );
        sleep(Duration::from_millis(50)).await;
    }
    let report = a.report(&etcd).await?.unwrap_or_default();
    let names: Vec<&str> = report["backends"]
        .as_array()
        .map(|b| b.iter().filter_map(|b| b["name"].as_str()).collect())
        .unwrap_or_default();
    ensure!(
        names == ["app1", "app2", "app3"],
        "a forged membership was taken in: {report}"
    );
    Ok(())
}
