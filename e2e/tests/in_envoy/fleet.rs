//! Several load balancers, one view of health: three real Envoys with upcheck in front of the same
//! two backends, sharing probe duties through a real 3-member etcd cluster on 127.0.0.1, users
//! spread over the three. Beside it, in the same run, the same three Envoys without the `fleet`
//! object, as today. With etcd's authentication on (a role for the prefix only), and with that
//! over TLS with a client certificate required, two balancers share the same way. Figures print
//! with `--nocapture`.

use std::ops::RangeInclusive;
use std::time::Duration;

use serde_json::json;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::etcd::{plugin, Balancer, Etcd};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::INTERVAL;
use upcheck_e2e::upstream::FakeUpstream;

/// The tests of this file run one at a time: each runs three etcd members and several Envoys on a
/// machine of two cores.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The lease TTL of the tests that kill no single etcd member: short, so that a dead holder is
/// replaced and a fleet without etcd falls back quickly.
const TTL: Duration = Duration::from_secs(3);

/// The lease TTL of the test that kills one etcd member, whichever it is, the leader too: the
/// product's default. A leader's election, and Envoy's checks of `/health` taking the dead member
/// out of the etcd cluster's rotation, took more than 3 s on a loaded 2-core machine, and a lease
/// that lapses then hands its duties over, as it should, which is not what that step is about.
const MEMBER_KILL_TTL: Duration = Duration::from_secs(6);

/// Users' requests over `balancers` in turn, 10 a second from `start` for `intervals` probe
/// intervals, one at a time, each at its time on the clock (or at once, when the answer before
/// it came late): how many failed, of how many.
async fn users(balancers: &[&Balancer], start: Instant, intervals: u32) -> (u32, u32) {
    let per_interval = 10;
    let (mut failed, mut sent) = (0, 0);
    for i in 0..intervals * per_interval {
        sleep_until(start + INTERVAL / per_interval * i).await;
        let b = balancers[i as usize % balancers.len()];
        sent += 1;
        if !b.user_request().await {
            failed += 1;
        }
    }
    (failed, sent)
}

fn probes(backends: &[&FakeUpstream]) -> Vec<u64> {
    backends.iter().map(|b| b.counts().probes).collect()
}

fn since(before: &[u64], backends: &[&FakeUpstream]) -> Vec<u64> {
    probes(backends)
        .iter()
        .zip(before)
        .map(|(now, then)| now - then)
        .collect()
}

/// Waits (at most 20 s) until etcd holds `balancers` balancer keys and a duty for each of
/// `backends` backends.
async fn until_settled(etcd: &Etcd, balancers: usize, backends: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let keys = etcd.range("upcheck/").await?;
        let count = |kind: &str| {
            keys.iter()
                .filter(|(k, _, _)| k.starts_with(&format!("upcheck/v1/{kind}/")))
                .count()
        };
        if count("balancers") == balancers && count("duty") == backends {
            return Ok(());
        }
        anyhow::ensure!(Instant::now() < deadline, "not settled: {keys:?}");
        sleep(Duration::from_millis(200)).await;
    }
}

/// Sends users through `fleet` for `intervals` probe intervals and prints (with `about`) the
/// probes each backend got meanwhile: no user may fail, and each count is within `expected`
/// (what `rule` says).
async fn probes_with_users(
    about: &str,
    fleet: &[&Balancer],
    backends: &[&FakeUpstream],
    intervals: u32,
    expected: RangeInclusive<u64>,
    rule: &str,
) -> anyhow::Result<()> {
    // The probes are counted over exactly `intervals` intervals, beside the users, whatever
    // their answers took on a loaded machine.
    let start = Instant::now();
    let before = probes(backends);
    let counting = async {
        sleep_until(start + INTERVAL * intervals).await;
        since(&before, backends)
    };
    let ((failed, sent), counted) = tokio::join!(users(fleet, start, intervals), counting);
    println!("{about}: probes per backend in {intervals} intervals {counted:?}; users failed {failed} of {sent}");
    anyhow::ensure!(failed == 0, "{about}: {failed} of {sent} users failed");
    anyhow::ensure!(
        counted.iter().all(|n| expected.contains(n)),
        "{rule}: {counted:?}, expected {expected:?} each"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_balancers_probe_each_backend_once_per_interval_and_hand_a_dead_holders_duty_over(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [&app1, &app2];

    // Today: three Envoys, each probing every backend.
    let alone = plugin(&backends, None);
    let today: [Balancer; 3] = Balancer::start_many_unjoined(&alone).await?;
    sleep(2 * INTERVAL).await;
    probes_with_users(
        "without a fleet, 3 balancers",
        &today.iter().collect::<Vec<_>>(),
        &backends,
        5,
        13..=17,
        "each of 3 balancers probes",
    )
    .await?;
    drop(today);

    // With the fleet: one prober per backend across the three.
    let mut etcd = Etcd::start(3).await?;
    let shared = plugin(
        &backends,
        Some(json!({"cluster": "etcd", "lease_ttl": "6s"})),
    );
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(Balancer::start(&shared, Some(&etcd)).await?);
    }
    until_settled(&etcd, 3, 2).await?;
    sleep(2 * INTERVAL).await;
    probes_with_users(
        "with the fleet, 3 balancers",
        &fleet.iter().collect::<Vec<_>>(),
        &backends,
        10,
        9..=11,
        "one prober per backend",
    )
    .await?;

    // The stats say the same: each backend's probe duty on one balancer, three counted, none
    // fallen back.
    for name in ["app1", "app2"] {
        let duties = futures_counts(&fleet, &format!("{name}.probe_duty")).await?;
        assert_eq!(duties.iter().sum::<u64>(), 1, "{name}: {duties:?}");
    }
    assert_eq!(futures_counts(&fleet, "fleet_balancers").await?, [3, 3, 3]);
    assert_eq!(futures_counts(&fleet, "fleet_local").await?, [0, 0, 0]);
    // So does each status page (another VM than the prober's): each backend probed here on
    // exactly one balancer, and by that one's lease on the others.
    let mut pages = Vec::new();
    for b in &fleet {
        pages.push(b.page_json().await?);
    }
    for (i, name) in ["app1", "app2"].iter().enumerate() {
        let duties: Vec<&str> = pages
            .iter()
            .map(|p| p["backends"][i]["probe_duty"].as_str().unwrap_or_default())
            .collect();
        let here: Vec<usize> = (0..3).filter(|b| duties[*b] == "here").collect();
        assert_eq!(here.len(), 1, "{name}: {duties:?}");
        let holder = pages[here[0]]["fleet"]["balancer"]
            .as_str()
            .unwrap_or_default();
        for (b, duty) in duties.iter().enumerate() {
            assert!(
                b == here[0] || *duty == holder,
                "{name}: {duties:?}, held by {holder}"
            );
        }
    }
    for p in &pages {
        assert_eq!(p["fleet"]["local"], false, "{p}");
        assert!(
            p["fleet"]["last_read_ago_ms"]
                .as_u64()
                .is_some_and(|ms| ms < 2_000),
            "{p}"
        );
    }
    println!(
        "status pages: {}",
        pages
            .iter()
            .map(|p| p["fleet"].to_string())
            .collect::<Vec<_>>()
            .join(" ")
    );

    // A value under the prefix that no upcheck wrote: ignored and logged, nothing else.
    etcd.put("upcheck/v1/active/app1@app1@forged", b"\x00garbage")
        .await?;
    etcd.put("upcheck/v2/duty/app1", b"a later version").await?;
    sleep(2 * INTERVAL).await;
    for b in &fleet {
        let log = b.log();
        assert!(
            log.contains("fleet: ignored the value at \"upcheck/v1/active/app1@app1@forged\""),
            "{log}"
        );
        assert!(
            log.contains("fleet: ignored the value at \"upcheck/v2/duty/app1\""),
            "{log}"
        );
        assert!(b.user_request().await, "still serving");
    }

    // One etcd member killed: nothing changes.
    etcd.kill(0);
    sleep(2 * INTERVAL).await;
    probes_with_users(
        "one etcd member killed",
        &fleet.iter().collect::<Vec<_>>(),
        &backends,
        5,
        4..=6,
        "still one prober per backend",
    )
    .await?;
    for b in &fleet {
        assert!(
            !b.log().contains("no usable answer from etcd"),
            "{}",
            b.log()
        );
    }

    // The balancer probing app1 killed with SIGKILL: another takes its duty over.
    let counts: Vec<u64> = futures_counts(&fleet, "app1.probes").await?;
    sleep(2 * INTERVAL).await;
    let later: Vec<u64> = futures_counts(&fleet, "app1.probes").await?;
    let holder = (0..3)
        .find(|i| later[*i] > counts[*i])
        .expect("one balancer probes app1");
    fleet[holder].kill();
    let killed = Instant::now();
    let survivors: Vec<&Balancer> = fleet
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != holder)
        .map(|(_, b)| b)
        .collect();
    let mut at_kill = Vec::new();
    for b in &survivors {
        at_kill.push(b.counter("app1.probes").await?);
    }
    let deadline = killed + MEMBER_KILL_TTL + 3 * INTERVAL;
    let taken_over = loop {
        let mut now = Vec::new();
        for b in &survivors {
            now.push(b.counter("app1.probes").await?);
        }
        if now.iter().zip(&at_kill).any(|(n, k)| n > k) {
            break killed.elapsed();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "nobody probes app1 {:?} after its holder was killed",
            killed.elapsed()
        );
        sleep(Duration::from_millis(100)).await;
    };
    println!("holder killed: app1 probed by another balancer {taken_over:?} later (TTL {MEMBER_KILL_TTL:?}, interval {INTERVAL:?})");
    assert!(
        taken_over <= MEMBER_KILL_TTL + 2 * INTERVAL,
        "{taken_over:?}"
    );
    sleep(INTERVAL).await;
    probes_with_users(
        "after the handover, 2 balancers",
        &survivors,
        &backends,
        5,
        4..=6,
        "one prober per backend again",
    )
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_etcd_member_down_each_balancer_probes_alone_then_rejoins_without_a_burst_or_a_flap(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [&app1, &app2];
    let mut etcd = Etcd::start(3).await?;
    let shared = plugin(
        &backends,
        Some(json!({"cluster": "etcd", "lease_ttl": "3s"})),
    );
    let mut fleet = Vec::new();
    for _ in 0..3 {
        fleet.push(Balancer::start(&shared, Some(&etcd)).await?);
    }
    let all: Vec<&Balancer> = fleet.iter().collect();
    until_settled(&etcd, 3, 2).await?;
    sleep(2 * INTERVAL).await;

    // Every member killed: each balancer falls back to probing everything itself within one
    // TTL (and the tick that notices), says so once, and its page shows it.
    for i in 0..3 {
        etcd.kill(i);
    }
    let down = Instant::now();
    let deadline = down + TTL + 2 * INTERVAL;
    let fell_back = loop {
        if futures_counts(&fleet, "fleet_local").await? == [1, 1, 1] {
            break down.elapsed();
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not fallen back after {:?}",
            down.elapsed()
        );
        sleep(Duration::from_millis(100)).await;
    };
    println!(
        "every etcd member killed: every balancer probing alone {fell_back:?} later (TTL {TTL:?})"
    );
    assert!(fell_back <= TTL + INTERVAL, "{fell_back:?}");
    probes_with_users(
        "etcd down, 3 balancers",
        &all,
        &backends,
        5,
        13..=17,
        "each balancer probes alone",
    )
    .await?;
    for b in &fleet {
        let log = b.log();
        assert_eq!(
            log.matches("fleet: no usable answer from etcd").count(),
            1,
            "{log}"
        );
        let page = b.page_json().await?;
        assert_eq!(page["fleet"]["local"], true, "{page}");
        for i in 0..2 {
            assert_eq!(page["backends"][i]["probe_duty"], "here", "{page}");
        }
    }

    // etcd back: each rejoins; probes per interval never more than while alone (no burst), one
    // per backend again once the duties are shared, and no backend ever leaves (no flap).
    etcd.restart().await?;
    let back = Instant::now();
    // The probes are counted at each interval's edge on the clock, beside the users and the
    // stats reads, so that no probe falls between two intervals however long those took.
    let edges = async {
        let mut seen = Vec::new();
        for i in 0..=15 {
            sleep_until(back + INTERVAL * i).await;
            seen.push(probes(&backends));
        }
        seen
    };
    let watched = async {
        let (mut rejoined, mut failed) = (None, 0);
        for i in 0..15 {
            failed += users(&all, back + INTERVAL * i, 1).await.0;
            if rejoined.is_none() && futures_counts(&fleet, "fleet_local").await? == [0, 0, 0] {
                rejoined = Some(back.elapsed());
            }
        }
        anyhow::Ok((rejoined, failed))
    };
    let (edges, watched) = tokio::join!(edges, watched);
    let (rejoined, failed) = watched?;
    let per_interval: Vec<Vec<u64>> = edges
        .windows(2)
        .map(|pair| pair[1].iter().zip(&pair[0]).map(|(b, a)| b - a).collect())
        .collect();
    println!("etcd restarted: rejoined {rejoined:?} later; probes per backend per interval {per_interval:?}; users failed {failed}");
    assert!(rejoined.is_some(), "not rejoined in 15 intervals");
    assert_eq!(failed, 0, "rejoining costs no user a failure");
    for n in per_interval.iter().flatten() {
        assert!(
            *n <= 3,
            "no burst, never more than while alone: {per_interval:?}"
        );
    }
    for backend in 0..2 {
        let last: u64 = per_interval.iter().rev().take(5).map(|p| p[backend]).sum();
        assert!(
            (4..=6).contains(&last),
            "one prober per backend again: {per_interval:?}"
        );
    }
    for b in &fleet {
        let page = b.page_json().await?;
        assert_eq!(page["fleet"]["local"], false, "{page}");
        let left = page["history"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["to"] == "unhealthy" || c["to"] == "ejected")
            .count();
        assert_eq!(left, 0, "no flap: {page}");
        assert!(b.log().contains("fleet: etcd answers again"), "{}", b.log());
    }
    Ok(())
}

/// Each balancer's counter `name`.
async fn futures_counts(fleet: &[Balancer], name: &str) -> anyhow::Result<Vec<u64>> {
    let mut out = Vec::new();
    for b in fleet {
        out.push(b.counter(name).await?);
    }
    Ok(out)
}

/// Turns `etcd`'s authentication on with a role for the prefix only, and starts two balancers
/// that share through it as that role's user: each backend is probed once per interval, no user
/// fails, and the password shows nowhere (log, stats, status page). Returns the balancers.
async fn two_balancers_with_authentication_on(
    etcd: &mut Etcd,
    backends: &[&FakeUpstream],
    about: &str,
) -> anyhow::Result<Vec<Balancer>> {
    const PASSWORD: &str = "pass-of-the-balancers";
    etcd.enable_auth("balancer", PASSWORD, "upcheck/").await?;
    assert!(etcd.may_read("balancer", PASSWORD, "upcheck/").await?);
    assert!(
        !etcd.may_read("balancer", PASSWORD, "elsewhere/").await?,
        "the role is the prefix's only"
    );
    let shared = plugin(
        backends,
        Some(
            json!({"cluster": "etcd", "lease_ttl": "3s", "user": "balancer", "password": PASSWORD}),
        ),
    );
    let mut fleet = Vec::new();
    for _ in 0..2 {
        fleet.push(Balancer::start(&shared, Some(etcd)).await?);
    }
    until_settled(etcd, 2, 2).await?;
    sleep(2 * INTERVAL).await;
    probes_with_users(
        about,
        &fleet.iter().collect::<Vec<_>>(),
        backends,
        5,
        4..=6,
        "one prober per backend",
    )
    .await?;
    for (i, b) in fleet.iter().enumerate() {
        let shown = b.log() + &b.stats_and_page().await?;
        assert!(!shown.contains(PASSWORD), "the password is shown: {shown}");
        assert!(!shown.contains("no usable answer from etcd"), "{shown}");
        let (healthy, checked, failed) = (
            stat(&shown, "cluster.etcd.membership_healthy"),
            stat(&shown, "cluster.etcd.health_check.success"),
            stat(&shown, "cluster.etcd.health_check.failure"),
        );
        println!(
            "{about}, balancer {i}: {healthy} of 3 etcd members healthy by Envoy's checks of \
             /health ({checked} passed, {failed} failed)"
        );
        assert_eq!(healthy, 3, "Envoy's checks of /health pass: {shown}");
    }
    Ok(fleet)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcds_authentication_on_and_a_role_for_the_prefix_only_the_balancers_share_as_before(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut etcd = Etcd::start(3).await?;
    two_balancers_with_authentication_on(&mut etcd, &[&app1, &app2], "auth on, 2 balancers")
        .await?;
    Ok(())
}

/// Envoy's statistic `name` in `stats` (`/stats` as text), 0 when it has none.
fn stat(stats: &str, name: &str) -> u64 {
    stats
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_with_a_client_certificate_required_and_authentication_on_the_balancers_share_as_before(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut etcd = Etcd::start_tls(3).await?;
    let fleet = two_balancers_with_authentication_on(
        &mut etcd,
        &[&app1, &app2],
        "TLS with a client certificate and auth on, 2 balancers",
    )
    .await?;
    for (i, b) in fleet.iter().enumerate() {
        let stats = b.stats_and_page().await?;
        let handshakes = stat(&stats, "cluster.etcd.ssl.handshake");
        let calls = stat(&stats, "cluster.etcd.upstream_rq_200");
        println!(
            "TLS, balancer {i}: {handshakes} TLS handshakes with etcd, {calls} calls answered 200"
        );
        assert!(
            handshakes >= 3,
            "a TLS connection to each member at least: {stats}"
        );
        for error in ["connection_error", "fail_verify_error", "fail_verify_san"] {
            let name = format!("cluster.etcd.ssl.{error}");
            assert_eq!(stat(&stats, &name), 0, "{name}: {stats}");
        }
    }
    Ok(())
}
