//! Evidence shared through etcd: a backend that starts answering 502 in the middle of traffic
//! (the passive checks' failures), and a booted backend whose pages start failing with 500 while
//! its `/up` passes (the peer comparison's counts and its ejection), cost as many failed user
//! requests behind two real Envoys sharing a real etcd as behind one, and the ejection one of
//! them decides holds on the other at once. Each test runs its set-ups one after the other, with
//! the same traffic; figures print with `--nocapture`.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::{sleep, Instant};
use upcheck_e2e::etcd::{plugin, Balancer, Etcd};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::upstream::FakeUpstream;

/// `max_fails` of the test's configuration.
const MAX_FAILS: u32 = 3;

/// User requests a second, over all balancers: slow enough that each of two balancers sees a
/// failure of the broken backend only about once a second, so that alone it would not fill a
/// window of 3 failures before the probes catch up, and the shared count is what ejects.
const PER_SECOND: u32 = 4;

/// The configuration: cluster routing (no retries, so a user sees the backend's 502), probes
/// rare enough that only the passive checks eject within the test, 3 failures within 10 s.
fn config(backends: &[&FakeUpstream], fleet: Option<Value>) -> Value {
    let mut config = plugin(backends, fleet);
    config["routing"] = json!("cluster");
    config["health_checks"]["active"]["interval"] = json!("30s");
    config["health_checks"]["passive"] = json!({"fail_duration": "10s", "max_fails": MAX_FAILS});
    config
}

/// Waits (at most 20 s) until every balancer shows `backend` healthy.
async fn until_healthy(balancers: &[&Balancer], backend: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    let gauge = format!("{backend}.healthy");
    loop {
        let mut all = true;
        for b in balancers {
            all &= b.counter(&gauge).await? == 1;
        }
        if all {
            return Ok(());
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{backend} not healthy everywhere"
        );
        sleep(Duration::from_millis(100)).await;
    }
}

/// Users' requests over `balancers` in turn, `per_second` for `seconds`: how many failed.
async fn users(balancers: &[&Balancer], per_second: u32, seconds: u32) -> u32 {
    let mut failed = 0;
    for i in 0..seconds * per_second {
        if !balancers[i as usize % balancers.len()].user_request().await {
            failed += 1;
        }
        sleep(Duration::from_secs(1) / per_second).await;
    }
    failed
}

/// `broken` starts answering as `mode` says; users' requests go over `balancers` in turn,
/// `per_second` for `seconds`: how many failed, and when (after the switch) each balancer first
/// showed `broken` out of service.
async fn break_mid_traffic(
    balancers: &[&Balancer],
    broken: &FakeUpstream,
    mode: Mode,
    (per_second, seconds): (u32, u32),
) -> anyhow::Result<(u32, Vec<Option<Duration>>)> {
    broken.set_mode(mode);
    let switched = Instant::now();
    let users = users(balancers, per_second, seconds);
    let gauge = format!("{}.healthy", broken.name());
    let watch = async {
        let mut seen = vec![None; balancers.len()];
        let deadline = switched + Duration::from_secs(u64::from(seconds));
        while Instant::now() < deadline {
            for (b, seen) in balancers.iter().zip(seen.iter_mut()) {
                if seen.is_none() && b.counter(&gauge).await? == 0 {
                    *seen = Some(switched.elapsed());
                }
            }
            sleep(Duration::from_millis(25)).await;
        }
        anyhow::Ok(seen)
    };
    let (failed, seen) = tokio::join!(users, watch);
    Ok((failed, seen?))
}

/// Two balancers from `plugin` sharing `etcd`, both registered and showing `backend` healthy.
async fn sharing(
    plugin: &Value,
    etcd: &Etcd,
    backend: &str,
) -> anyhow::Result<(Balancer, Balancer)> {
    let a = Balancer::start(plugin, Some(etcd)).await?;
    let b = Balancer::start(plugin, Some(etcd)).await?;
    until_healthy(&[&a, &b], backend).await?;
    let prefix = plugin["fleet"]["prefix"].as_str().unwrap_or("upcheck");
    let deadline = Instant::now() + Duration::from_secs(20);
    while etcd.range(&format!("{prefix}/v1/balancers/")).await?.len() < 2 {
        anyhow::ensure!(Instant::now() < deadline, "the balancers never registered");
        sleep(Duration::from_millis(100)).await;
    }
    // Each follows the prefix with etcd's watch, as `upcheck envoy --etcd` writes it.
    let following = format!("fleet: following {prefix}/ in etcd from revision");
    for balancer in [&a, &b] {
        balancer.until_logged(&following).await?;
    }
    Ok((a, b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_two_balancers_sharing_etcd_a_broken_backend_fails_no_more_users_than_behind_one(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [&app1, &app2];

    // One balancer, as today.
    let single = Balancer::start(&config(&backends, None), None).await?;
    until_healthy(&[&single], "app2").await?;
    let (alone, _) =
        break_mid_traffic(&[&single], &app2, Mode::Status(502), (PER_SECOND, 5)).await?;
    drop(single);
    app2.set_mode(Mode::Ok);

    // Two balancers without the fleet: each must see max_fails failures itself.
    let apart = config(&backends, None);
    let [c, d] = Balancer::start_many_unjoined(&apart).await?;
    until_healthy(&[&c, &d], "app2").await?;
    let (unshared, _) =
        break_mid_traffic(&[&c, &d], &app2, Mode::Status(502), (PER_SECOND, 5)).await?;
    drop((c, d));
    app2.set_mode(Mode::Ok);

    // Two balancers sharing their evidence through etcd, users alternating between them.
    let etcd = Etcd::start(1).await?;
    let shared = config(
        &backends,
        Some(json!({"cluster": "etcd", "lease_ttl": "3s"})),
    );
    let (a, b) = sharing(&shared, &etcd, "app2").await?;
    let pair = [&a, &b];
    let (together, seen) =
        break_mid_traffic(&pair, &app2, Mode::Status(502), (PER_SECOND, 5)).await?;
    let mut own = Vec::new();
    for balancer in pair {
        own.push(balancer.counter("app2.request_failures").await?);
    }
    println!(
        "app2 answering 502 from mid-traffic, {PER_SECOND} user requests/s for 5 s, max_fails {MAX_FAILS}: \
         users failed {alone} behind one balancer, {unshared} behind two without the fleet, \
         {together} behind two sharing etcd \
         (counted by each: {own:?}); app2 shown unhealthy on each {seen:?} after the switch"
    );
    assert!(
        alone >= MAX_FAILS,
        "one balancer ejects after max_fails: {alone}"
    );
    assert!(
        together <= MAX_FAILS + 2,
        "two balancers eject after max_fails in all, give or take a read: {together}"
    );
    assert!(
        together <= alone + 2,
        "no more failures behind two than behind one: {together} against {alone}"
    );
    assert!(
        together < unshared,
        "{together} against {unshared} unshared"
    );
    // Neither counted max_fails failures by itself: each ejection came from the shared count.
    assert!(own.iter().all(|n| *n < u64::from(MAX_FAILS)), "{own:?}");
    let [Some(first), Some(second)] = [seen[0], seen[1]] else {
        panic!("app2 not ejected on both: {seen:?}");
    };
    // How soon is a figure, printed (measured: 356 to 386 ms); that it holds on both is asserted.
    let lag = first.abs_diff(second);
    println!("the ejection held on the other balancer {lag:?} after the first");
    Ok(())
}

/// The peer comparison's test: three backends, probes rare and passing (`/up` answers 200
/// throughout), and 500 not among the passive checks' statuses, so only the comparison with the
/// peers can eject the backend whose pages fail.
fn peers_config(backends: &[&FakeUpstream], fleet: Option<Value>) -> Value {
    let mut config = config(backends, fleet);
    config["health_checks"]["passive"] = json!({"unhealthy_status": [502, 503, 504]});
    config
}

/// User requests a second in the peer comparison's test: each of two balancers sees app3 fail
/// about once a second, so alone it needs about 5 s for `min_failures` (5).
const PEERS_PER_SECOND: u32 = 6;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_two_balancers_sharing_etcd_a_backend_whose_pages_fail_fails_no_more_users_than_behind_one(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let app3 = FakeUpstream::start("app3", Mode::Ok).await?;
    let backends = [&app1, &app2, &app3];
    let pages = || Mode::Pages(500);
    let seconds = 8;
    let pace = (PEERS_PER_SECOND, seconds);
    // Each set-up serves 3 s of traffic before the switch, so that app3 was serving when it broke.
    let warm = 3;

    let single = Balancer::start(&peers_config(&backends, None), None).await?;
    until_healthy(&[&single], "app3").await?;
    assert_eq!(users(&[&single], PEERS_PER_SECOND, warm).await, 0);
    let (alone, _) = break_mid_traffic(&[&single], &app3, pages(), pace).await?;
    drop(single);
    app3.set_mode(Mode::Ok);

    let apart = peers_config(&backends, None);
    let [c, d] = Balancer::start_many_unjoined(&apart).await?;
    until_healthy(&[&c, &d], "app3").await?;
    assert_eq!(users(&[&c, &d], PEERS_PER_SECOND, warm).await, 0);
    let (unshared, _) = break_mid_traffic(&[&c, &d], &app3, pages(), pace).await?;
    drop((c, d));
    app3.set_mode(Mode::Ok);

    let etcd = Etcd::start(1).await?;
    let fleet = json!({"cluster": "etcd", "lease_ttl": "3s"});
    let (a, b) = sharing(&peers_config(&backends, Some(fleet)), &etcd, "app3").await?;
    let pair = [&a, &b];
    assert_eq!(users(&pair, PEERS_PER_SECOND, warm).await, 0);
    let (together, seen) = break_mid_traffic(&pair, &app3, pages(), pace).await?;
    let mut decided = Vec::new();
    for balancer in pair {
        decided.push(balancer.counter("app3.outlier_failing").await?);
    }
    let published = etcd.range("upcheck/v1/ejected/").await?;
    println!(
        "app3's pages answering 500 from mid-traffic (/up 200), {PEERS_PER_SECOND} user requests/s \
         for {seconds} s: users failed {alone} behind one balancer, {unshared} behind two without \
         the fleet, {together} behind two sharing etcd (outlier verdicts reached by each: {decided:?}); app3 shown \
         out on each {seen:?} after the switch; {} ejection published",
        published.len()
    );
    assert!(alone > 0, "the fault was not exercised");
    // Fewer than behind two balancers apart. Against one balancer, the counts arrive up to a
    // publication and a read late (half a second each), which costs a failure or a few: a
    // figure, printed above.
    assert!(
        together < unshared,
        "{together} against {unshared} unshared"
    );
    // Each judges on the counts of both, so both may decide at about the same time; one key per
    // backend holds the ejection either way.
    assert!(decided.iter().sum::<u64>() >= 1, "{decided:?}");
    assert_eq!(published.len(), 1, "{published:?}");
    let [Some(first), Some(second)] = [seen[0], seen[1]] else {
        panic!("app3 not out on both: {seen:?}");
    };
    println!(
        "the ejection held on the other balancer {:?} after the first",
        first.abs_diff(second)
    );
    Ok(())
}

/// How many failures `balancer`'s status page shows for `backend`.
async fn failures_shown(balancer: &Balancer, backend: &str) -> anyhow::Result<u64> {
    let page = balancer.page_json().await?;
    Ok(page["backends"]
        .as_array()
        .and_then(|all| all.iter().find(|b| b["name"] == backend))
        .and_then(|b| b["failures"].as_u64())
        .unwrap_or(0))
}

/// How soon a failure one balancer counted is held by the other, which follows etcd's watch:
/// from the user's 502 through one balancer to the other's status page showing the failure,
/// over twenty failures a second apart (each remembered for a second and never enough to eject,
/// outlier detection off, so every trial starts from none). Printed: the median and the longest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_counted_behind_one_balancer_is_held_by_the_other_a_stream_event_later(
) -> anyhow::Result<()> {
    const TRIALS: usize = 20;
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let etcd = Etcd::start(1).await?;
    let mut shared = config(
        &[&app1, &app2],
        Some(json!({"cluster": "etcd", "lease_ttl": "3s"})),
    );
    shared["health_checks"]["passive"] = json!({"fail_duration": "1s", "max_fails": 1000});
    // Nor does the peer comparison take app2 out: only the failure's way is measured.
    shared["health_checks"]["outlier"] = json!({"enabled": false});
    let (a, b) = sharing(&shared, &etcd, "app2").await?;
    let mut took = Vec::new();
    for trial in 0..TRIALS {
        // Its pages only: its probes keep passing.
        app2.set_mode(Mode::Pages(502));
        // Round robin over both (a worker takes a probe result in within a tick, 200 ms).
        let mut sent = 0;
        while a.user_request().await {
            sent += 1;
            anyhow::ensure!(sent < 50, "no request reached app2 in trial {trial}");
            sleep(Duration::from_millis(10)).await;
        }
        let failed = Instant::now();
        app2.set_mode(Mode::Ok);
        while failures_shown(&b, "app2").await? == 0 {
            anyhow::ensure!(
                failed.elapsed() < Duration::from_secs(5),
                "the other balancer never held trial {trial}'s failure"
            );
            sleep(Duration::from_millis(2)).await;
        }
        took.push(failed.elapsed());
        // Both forget it before the next.
        sleep(Duration::from_millis(1_200)).await;
        while failures_shown(&a, "app2").await? + failures_shown(&b, "app2").await? > 0 {
            anyhow::ensure!(
                failed.elapsed() < Duration::from_secs(10),
                "never forgotten"
            );
            sleep(Duration::from_millis(50)).await;
        }
    }
    took.sort();
    let at = |q: usize| took[(took.len() * q / 100).min(took.len() - 1)];
    println!(
        "a failure behind one balancer held by the other, {TRIALS} trials: p50 {:?}, p99 {:?} (all: {took:?})",
        at(50),
        at(99)
    );
    Ok(())
}

/// app2 answering 502 from mid-traffic, users alternating between two balancers that follow
/// etcd's watch, at 20 and 200 user requests a second, against one balancer at the same rate,
/// in the same run: what sharing costs over one balancer, printed, and bounded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_two_balancers_following_etcd_a_broken_backend_costs_what_it_costs_behind_one(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let backends = [&app1, &app2];
    let etcd = Etcd::start(1).await?;
    let mut figures = Vec::new();
    for per_second in [20, 200] {
        let single = Balancer::start_unjoined_within(&config(&backends, None), &etcd).await?;
        until_healthy(&[&single], "app2").await?;
        let (alone, _) =
            break_mid_traffic(&[&single], &app2, Mode::Status(502), (per_second, 3)).await?;
        drop(single);
        app2.set_mode(Mode::Ok);

        let prefix = format!("rate{per_second}");
        let shared = config(
            &backends,
            Some(json!({"cluster": "etcd", "lease_ttl": "3s", "prefix": prefix})),
        );
        let (a, b) = sharing(&shared, &etcd, "app2").await?;
        let (together, seen) =
            break_mid_traffic(&[&a, &b], &app2, Mode::Status(502), (per_second, 3)).await?;
        drop((a, b));
        app2.set_mode(Mode::Ok);
        println!(
            "{per_second} user requests/s, app2 answering 502 from mid-traffic: users failed {alone} \
             behind one balancer, {together} behind two following etcd; app2 out on each {seen:?} \
             after the switch"
        );
        figures.push((per_second, alone, together));
    }
    for (per_second, alone, together) in figures {
        assert!(
            alone >= MAX_FAILS,
            "{per_second}/s: one balancer ejects after max_fails: {alone}"
        );
        assert!(
            together <= alone + 3,
            "{per_second}/s: behind two {together}, behind one {alone}"
        );
    }
    Ok(())
}
