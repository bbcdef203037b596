//! The fleet under a partial fault: two real Envoys written by `upcheck envoy --etcd` (host
//! routing, the default) share one real etcd, users alternate between them, and 3 s in the path
//! from the balancer that probes app2 to app2 is cut by the kernel (an `iptables` rule on that
//! balancer's source address: [`upcheck_e2e::path_cut`]), a black hole or a refusal, while the
//! other balancer reaches app2 as before. Behind the cut balancer no user fails and few wait over
//! a second; behind the other no user fails and app2 keeps its share of the users: one
//! balancer's broken path never takes a backend from the others. Each fault prints a row per
//! balancer (users failed, slower than 1 s, app2's share of the answers over the second half, its
//! probes per interval).
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy fleet_paths:: -- --nocapture`
//! (as root, with `iptables`; `make e2e` runs it).

use std::net::Ipv4Addr;
use std::time::Duration;

use serde_json::json;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::etcd::Machine;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::path_cut::{Cut, PathCut};
use upcheck_e2e::plugin::INTERVAL;

use super::fleet_users::{prober_of_app2, probes_sent, Behind, Fleet, PER_SECOND};

/// The tests of this file run one at a time: each runs an etcd and two Envoys, and cuts paths
/// on this machine's one OUTPUT chain.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long users come.
const USERS_FOR: Duration = Duration::from_secs(20);

/// When the path is cut, from the start of the users.
const CUT_AT: Duration = Duration::from_secs(3);

/// Where each balancer's connections leave from.
const SOURCES: [Ipv4Addr; 2] = [Ipv4Addr::new(127, 0, 0, 2), Ipv4Addr::new(127, 0, 0, 3)];

/// Two balancers sharing one etcd, each leaving from its own address of [`SOURCES`] when `bound`
/// (so that one's path can be cut alone).
async fn two_balancers(bound: bool) -> anyhow::Result<Fleet> {
    let machines = SOURCES.map(|source| Machine {
        source: bound.then_some(source),
        ..Machine::default()
    });
    Fleet::start(&machines).await
}

/// Two balancers sharing one etcd, app2's prober's path to app2 cut as `cut` says while users
/// alternate between them: what users met behind each, printed, and the bars held.
async fn one_path_cut(cut: Cut) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let Fleet {
        app2,
        balancers: fleet,
        ..
    } = &two_balancers(true).await?;
    let prober = prober_of_app2(fleet).await?;
    let other = 1 - prober;
    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    let total = PER_SECOND * USERS_FOR.as_secs() as u32;
    let cut_made = start + CUT_AT;
    let users = async {
        let mut cut_since = None;
        for i in 0..total {
            let at = start + Duration::from_secs(1) / PER_SECOND * i;
            sleep_until(at).await;
            if cut_since.is_none() && at >= start + CUT_AT {
                let made = PathCut::new(SOURCES[prober], app2.addr(), cut)?;
                let counted = (app2.counts().probes, probes_sent(fleet).await?);
                cut_since = Some((made, Instant::now(), counted));
            }
            let b = i as usize % 2;
            let visit = fleet[b].visit().await;
            behind[b].take(&visit, i >= total / 2);
        }
        cut_since.ok_or_else(|| anyhow::anyhow!("the path was never cut"))
    };
    // What the other's page says of app2 while the cut balancer's failures are fresh: the first
    // answer that names a balancer seeing it failing, within 10 s of the cut.
    let watched = async {
        sleep_until(cut_made).await;
        let deadline = cut_made + Duration::from_secs(10);
        loop {
            let app2 = fleet[other].page_json().await?["backends"][1].clone();
            if app2["failing_behind"]
                .as_array()
                .is_some_and(|f| !f.is_empty())
                || Instant::now() >= deadline
            {
                return anyhow::Ok(app2);
            }
            sleep(Duration::from_millis(100)).await;
        }
    };
    let (cut_since, failing_seen) = tokio::join!(users, watched);
    let (_cut, cut_at, (received_before, sent_before)) = cut_since?;
    let failing_seen = failing_seen?;
    let intervals = cut_at.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let probes = (probes_sent(fleet).await? - sent_before) as f64 / intervals;
    let received = (app2.counts().probes - received_before) as f64 / intervals;

    for (b, who) in [(prober, "app2's prober, path cut"), (other, "the other")] {
        let seen = &behind[b];
        println!(
            "fleet paths | {cut:?} | {who} | users failed {} of {} | slower than 1 s {} | app2's share over the second half {:.2} | app2's probes an interval: {probes:.2} sent by the fleet, {received:.2} received",
            seen.failed,
            seen.sent,
            seen.slow,
            seen.share()
        );
    }
    let page = fleet[other].page_json().await?;
    println!(
        "fleet paths | {cut:?} | the other's page: app2 {}",
        page["backends"][1]
    );
    println!("fleet paths | {cut:?} | the other's page after the cut: app2 {failing_seen}");
    // A refused connection is repeated at once and counts toward max_fails, so the cut balancer
    // publishes it; a black hole's attempts are hedged at the per-try timeout the peers give,
    // which counts for the outlier rules only, and its ejection (stalled) stays its own.
    if cut == Cut::Refused {
        let cut_balancer = fleet[prober].page_json().await?["fleet"]["balancer"].clone();
        let seen = json!([{"balancer": cut_balancer, "path": true}]);
        anyhow::ensure!(
            failing_seen["failing_behind"] == seen,
            "the other's page says the cut balancer sees app2 failing, maybe by its path: {failing_seen}"
        );
    }

    let (cut_side, far_side) = (&behind[prober], &behind[other]);
    anyhow::ensure!(
        cut_side.failed == 0,
        "behind the cut balancer: {cut_side:?}"
    );
    anyhow::ensure!(cut_side.slow <= 5, "behind the cut balancer: {cut_side:?}");
    anyhow::ensure!(far_side.failed == 0, "behind the other: {far_side:?}");
    anyhow::ensure!(
        far_side.share() >= 0.35,
        "app2 kept its share behind the other: {far_side:?}"
    );
    anyhow::ensure!(
        (0.5..=2.5).contains(&probes),
        "app2 probed about once an interval by the fleet: {probes:.2}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_hole_between_app2s_prober_and_app2_costs_no_user_and_takes_app2_from_no_other_balancer(
) -> anyhow::Result<()> {
    one_path_cut(Cut::BlackHole).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_between_app2s_prober_and_app2_costs_no_user_and_takes_app2_from_no_other_balancer(
) -> anyhow::Result<()> {
    one_path_cut(Cut::Refused).await
}

/// Sends `signal` (`STOP`, `CONT`) to process `pid`.
fn signal(pid: u32, signal: &str) -> anyhow::Result<()> {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()?;
    anyhow::ensure!(status.success(), "kill -{signal} {pid}: {status}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prober_frozen_past_its_lease_writes_nothing_it_saw_before_and_sends_no_user_to_a_backend_broken_meanwhile(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let Fleet {
        app2,
        etcd,
        balancers: fleet,
        ..
    } = &two_balancers(false).await?;
    let frozen = prober_of_app2(fleet).await?;
    let other = 1 - frozen;
    let pid = fleet[frozen]
        .pid()
        .ok_or_else(|| anyhow::anyhow!("no Envoy"))?;
    // Frozen for twice the lease TTL; meanwhile app2 breaks (every answer 503, `/up` too), which
    // the other balancer, taking app2's duty, finds.
    signal(pid, "STOP")?;
    sleep(Duration::from_secs(2)).await;
    app2.set_mode(Mode::Status(503));
    sleep(Duration::from_secs(4)).await;
    let before_wake = app2.counts().requests;
    signal(pid, "CONT")?;
    // It wakes still holding app2 healthy, as it last probed it. 10 s of users through both.
    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    for i in 0..PER_SECOND * 10 {
        sleep_until(start + Duration::from_secs(1) / PER_SECOND * i).await;
        let b = i as usize % 2;
        let visit = fleet[b].visit().await;
        behind[b].take(&visit, true);
    }
    let reached_app2 = app2.counts().requests - before_wake;
    let page = fleet[other].page_json().await?;
    for (b, who) in [(frozen, "woken"), (other, "the other")] {
        println!(
            "fleet paths | frozen 6 s | behind {who}: users failed {} of {}, slower than 1 s {}",
            behind[b].failed, behind[b].sent, behind[b].slow
        );
    }
    println!(
        "fleet paths | frozen 6 s | user requests reaching the broken app2 after the wake: {reached_app2}; the other's page: app2 {}",
        page["backends"][1]
    );
    let stale = etcd.range("upcheck/").await?;
    println!("fleet paths | frozen 6 s | etcd holds {} keys", stale.len());
    anyhow::ensure!(
        behind[other].failed == 0,
        "behind the other: {:?}",
        behind[other]
    );
    anyhow::ensure!(
        behind[frozen].failed == 0,
        "behind the woken one: {:?}",
        behind[frozen]
    );
    // Each user request that reached app2 met its 503 and was repeated on app1: at most a
    // failure window's worth (max_fails 3 per balancer) before each ejects it by its own.
    anyhow::ensure!(
        reached_app2 <= 6,
        "the broken app2 got {reached_app2} user requests after the wake"
    );
    anyhow::ensure!(page["backends"][1]["routable"] == false, "{page}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balancer_cut_from_etcd_but_not_from_its_users_probes_alone_and_costs_no_user(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let Fleet {
        app1,
        app2,
        etcd,
        balancers: fleet,
        ..
    } = &two_balancers(true).await?;
    prober_of_app2(fleet).await?;
    let member = etcd.clients()[0];
    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    let total = PER_SECOND * USERS_FOR.as_secs() as u32;
    let mut cut = None;
    let mut counted_from = None;
    for i in 0..total {
        let at = start + Duration::from_secs(1) / PER_SECOND * i;
        sleep_until(at).await;
        if cut.is_none() && at >= start + CUT_AT {
            cut = Some(PathCut::new(SOURCES[0], member, Cut::BlackHole)?);
        }
        // Probes are counted over the last half, the cut balancer on its own by then.
        if counted_from.is_none() && i >= total / 2 {
            let probes = app1.counts().probes + app2.counts().probes;
            counted_from = Some((Instant::now(), probes));
        }
        let b = i as usize % 2;
        let visit = fleet[b].visit().await;
        behind[b].take(&visit, i >= total / 2);
    }
    let (from, before) = counted_from.ok_or_else(|| anyhow::anyhow!("never counted"))?;
    let intervals = from.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let probes = (app1.counts().probes + app2.counts().probes - before) as f64 / 2.0 / intervals;
    let local = [
        fleet[0].counter("fleet_local").await?,
        fleet[1].counter("fleet_local").await?,
    ];
    for (b, who) in [(0, "cut from etcd"), (1, "the other")] {
        println!(
            "fleet paths | cut from etcd | {who}: users failed {} of {}, slower than 1 s {}, fallen back to local {}",
            behind[b].failed, behind[b].sent, behind[b].slow, local[b]
        );
    }
    println!("fleet paths | cut from etcd | probes per backend an interval, over the second half: {probes:.2}");
    println!(
        "fleet paths | cut from etcd | its page's fleet: {}",
        fleet[0].page_json().await?["fleet"]
    );
    drop(cut);
    anyhow::ensure!(behind.iter().all(|b| b.failed == 0), "{behind:?}");
    anyhow::ensure!(
        local == [1, 0],
        "only the cut balancer falls back: {local:?}"
    );
    anyhow::ensure!(
        (1.5..=2.5).contains(&probes),
        "each backend probed by the cut balancer and by the fleet: {probes:.2}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_no_balancer_reaches_is_taken_out_by_every_balancer_and_costs_no_user(
) -> anyhow::Result<()> {
    let _turn = TURN.lock().await;
    let Fleet {
        app2,
        balancers: fleet,
        ..
    } = &two_balancers(true).await?;
    prober_of_app2(fleet).await?;
    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    let total = PER_SECOND * 14;
    let mut cuts = Vec::new();
    for i in 0..total {
        let at = start + Duration::from_secs(1) / PER_SECOND * i;
        sleep_until(at).await;
        if cuts.is_empty() && at >= start + CUT_AT {
            for source in SOURCES {
                cuts.push(PathCut::new(source, app2.addr(), Cut::BlackHole)?);
            }
        }
        let b = i as usize % 2;
        let visit = fleet[b].visit().await;
        behind[b].take(&visit, i >= total / 2);
    }
    let mut app2_pages = Vec::new();
    for b in fleet {
        app2_pages.push(b.page_json().await?["backends"][1].clone());
    }
    for (b, who) in ["first", "second"].iter().enumerate() {
        println!(
            "fleet paths | reached by no balancer | behind the {who}: users failed {} of {}, slower than 1 s {}, app2's share over the second half {:.2}; its page: app2 {}",
            behind[b].failed, behind[b].sent, behind[b].slow, behind[b].share(), app2_pages[b]
        );
    }
    drop(cuts);
    anyhow::ensure!(behind.iter().all(|b| b.failed == 0), "{behind:?}");
    anyhow::ensure!(behind.iter().all(|b| b.slow <= 5), "{behind:?}");
    anyhow::ensure!(
        behind.iter().all(|b| b.late_app2 == 0),
        "app2 answered nobody over the second half: {behind:?}"
    );
    anyhow::ensure!(
        app2_pages.iter().all(|p| p["routable"] == false),
        "app2 out on every balancer: {app2_pages:?}"
    );
    Ok(())
}
