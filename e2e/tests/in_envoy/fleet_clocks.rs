//! The fleet with one balancer's wall clock 5 s ahead and another's 5 s behind
//! ([`upcheck_e2e::clock`]), as on machines whose NTP is broken: three real Envoys written by
//! `upcheck envoy --etcd` share one real etcd, users go to each in turn, and 3 s in app2's pages
//! start failing (its `/up` passes). None refuses what another shares as from the future (a
//! balancer 5 s ahead had every probe state, failure list and count it wrote refused by the
//! others, which then had no state for the backends it probed), and no user fails. It prints a
//! row per balancer (users failed, slower than 1 s, app2's failures and ejection as its page
//! says, values refused) and app2's probes per interval. That shared times count the same on
//! every clock is the policy core's test (`etcd::skew_tests`).
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy fleet_clocks:: -- --nocapture`

use std::time::Duration;

use tokio::time::{sleep_until, Instant};
use upcheck_e2e::etcd::Machine;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::INTERVAL;

use super::fleet_users::{prober_of_app2, probes_sent, Behind, Fleet, PER_SECOND};

/// How far each balancer's clock is off, in milliseconds.
const OFFSETS: [i64; 3] = [5_000, -5_000, 0];

/// How long users come.
const USERS_FOR: Duration = Duration::from_secs(12);

/// When app2's pages start failing, from the start of the users.
const BREAKS_AT: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_clocks_5_s_ahead_and_behind_no_balancer_refuses_what_another_shares_and_no_user_fails(
) -> anyhow::Result<()> {
    let machines = OFFSETS.map(|offset| Machine {
        clock_offset_ms: Some(offset),
        ..Machine::default()
    });
    let Fleet {
        app2,
        balancers: fleet,
        ..
    } = &Fleet::start(&machines).await?;
    let prober = prober_of_app2(fleet).await?;
    let mut behind: Vec<Behind> = OFFSETS.iter().map(|_| Behind::default()).collect();
    let start = Instant::now();
    let total = PER_SECOND * USERS_FOR.as_secs() as u32;
    let mut counted_from = None;
    for i in 0..total {
        let at = start + Duration::from_secs(1) / PER_SECOND * i;
        sleep_until(at).await;
        if counted_from.is_none() && at - start >= BREAKS_AT {
            app2.set_mode(Mode::Pages(503));
            counted_from = Some((Instant::now(), probes_sent(fleet).await?));
        }
        let b = i as usize % fleet.len();
        let visit = fleet[b].visit().await;
        behind[b].take(&visit, true);
    }
    let (from, sent) = counted_from.ok_or_else(|| anyhow::anyhow!("app2 never broke"))?;
    let intervals = from.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let probes = (probes_sent(fleet).await? - sent) as f64 / intervals;
    let mut app2_pages = Vec::new();
    for b in fleet {
        app2_pages.push(b.page_json().await?["backends"][1].clone());
    }
    let refused: Vec<Vec<String>> = fleet
        .iter()
        .map(|b| {
            b.log()
                .lines()
                .filter(|l| l.contains("fleet: ignored the value"))
                .map(str::to_owned)
                .collect()
        })
        .collect();
    for (b, offset) in OFFSETS.iter().enumerate() {
        let duty = if b == prober { ", app2's prober" } else { "" };
        println!(
            "fleet clocks | clock {offset:+} ms{duty} | users failed {} of {} | slower than 1 s {} | app2 routable {}, failures {}, outlier {} | values refused {}",
            behind[b].failed,
            behind[b].sent,
            behind[b].slow,
            app2_pages[b]["routable"],
            app2_pages[b]["failures"],
            app2_pages[b]["outlier"],
            refused[b].len(),
        );
    }
    println!("fleet clocks | app2's probes an interval: {probes:.2}");
    anyhow::ensure!(
        refused.iter().all(Vec::is_empty),
        "values refused: {refused:#?}"
    );
    anyhow::ensure!(behind.iter().all(|b| b.failed == 0), "{behind:?}");
    Ok(())
}
