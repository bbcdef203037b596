//! The fleet with etcd answering every request 500 ms late (a relay of the test's own in front
//! of it, [`upcheck_e2e::relay`]: a disk or a link that crawls rather than fails): two real
//! Envoys written by `upcheck envoy --etcd` share one real etcd through it, users alternate
//! between them, and 4 s in app2 breaks (503 to everything, `/up` too). The lease's keepalives
//! are answered well within its TTL, so neither balancer falls back to probing alone: one probe
//! of each backend an interval for the fleet as before, app2 out on both, and no user fails.
//! It prints a row per balancer (users failed, slower than 1 s, app2's share over the second
//! half, fallen back to local) and app2's probes per interval.
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy fleet_etcd_slow:: -- --nocapture`

use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use upcheck_e2e::etcd::{Etcd, Machine};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::INTERVAL;
use upcheck_e2e::relay::Relay;

use super::fleet_users::{prober_of_app2, probes_sent, Behind, Fleet, PER_SECOND};

/// How late etcd answers.
const LATE: Duration = Duration::from_millis(500);

/// How long users come, and when app2 breaks, from their start.
const USERS_FOR: Duration = Duration::from_secs(14);
const BREAKS_AT: Duration = Duration::from_secs(4);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_etcd_answering_500_ms_late_the_fleet_shares_one_view_and_no_user_fails(
) -> anyhow::Result<()> {
    let etcd = Etcd::start_beside(1, 2).await?;
    let relay = Relay::start(etcd.clients()[0], LATE).await?;
    let through_relay = Machine {
        etcd_via: Some(vec![relay.addr()]),
        ..Machine::default()
    };
    let Fleet {
        app2,
        balancers: fleet,
        ..
    } = &Fleet::with_etcd(etcd, &[through_relay.clone(), through_relay]).await?;
    prober_of_app2(fleet).await?;
    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    let total = PER_SECOND * USERS_FOR.as_secs() as u32;
    let sent_before = probes_sent(fleet).await?;
    for i in 0..total {
        let at = start + Duration::from_secs(1) / PER_SECOND * i;
        sleep_until(at).await;
        if at - start >= BREAKS_AT && app2.mode() == Mode::Ok {
            app2.set_mode(Mode::Status(503));
        }
        let b = i as usize % 2;
        let visit = fleet[b].visit().await;
        behind[b].take(&visit, i >= total / 2);
    }
    let intervals = start.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let probes = (probes_sent(fleet).await? - sent_before) as f64 / intervals;
    let mut local = Vec::new();
    let mut routable = Vec::new();
    for b in fleet {
        local.push(b.counter("fleet_local").await?);
        routable.push(b.page_json().await?["backends"][1]["routable"].clone());
    }
    for (b, who) in ["first", "second"].iter().enumerate() {
        println!(
            "fleet etcd | answering 500 ms late | {who}: users failed {} of {}, slower than 1 s {}, app2's share over the second half {:.2}, app2 routable at the end {}, fallen back to local {}",
            behind[b].failed,
            behind[b].sent,
            behind[b].slow,
            behind[b].share(),
            routable[b],
            local[b]
        );
    }
    println!(
        "fleet etcd | answering 500 ms late | app2's probes an interval, by the fleet: {probes:.2}"
    );
    println!(
        "fleet etcd | answering 500 ms late | the first's page's fleet: {}",
        fleet[0].page_json().await?["fleet"]
    );
    anyhow::ensure!(behind.iter().all(|b| b.failed == 0), "{behind:?}");
    anyhow::ensure!(local == [0, 0], "neither falls back to local: {local:?}");
    anyhow::ensure!(
        routable.iter().all(|r| *r == false),
        "app2 out on both: {routable:?}"
    );
    anyhow::ensure!(
        behind.iter().all(|b| b.late_app2 == 0),
        "no answer from app2 over the second half: {behind:?}"
    );
    anyhow::ensure!(
        (0.5..=2.5).contains(&probes),
        "app2 probed about once an interval by the fleet: {probes:.2}"
    );
    Ok(())
}
