//! The fleet when one of etcd's three members is parted from its peers but not from the
//! balancers: member 0 runs in a network namespace of the test's own and is made the leader,
//! two real Envoys written by `upcheck envoy --etcd` (host routing) share the cluster with each
//! one's watch on member 0, users alternate between them, and 3 s in the kernel drops every
//! packet between member 0 and its peers ([`upcheck_e2e::etcd::Partition`]) while the balancers
//! still reach it. The other two elect a leader of their own; member 0 keeps answering clients
//! without one, so its `/health` fails (Envoy's checks pass it over) and etcd ends the watches it
//! holds (the module opens them with `hasleader`), to be resumed on a member that has a leader.
//! Then app2 breaks, so the fleet has something to share across the partition: 1 s after the
//! partition, while the watches still sit on the member without a leader.
//!
//! What a careful operator expects: no user fails behind either balancer, app2 ends out of
//! rotation on both, neither falls back to local (a quorum of etcd stays reachable), and each
//! watch ends on a member with a leader. The rows printed: per balancer users failed, slower than
//! 1 s and app2's share over the second half; where each watch sat before and after; how long
//! each balancer's view stayed behind etcd's revision while its page said it had read lately;
//! app2's probes an interval by the fleet and the user requests that reached it broken; each
//! page's `fleet`; Envoy's statistics of the etcd cluster (calls timed out, by member); what each
//! balancer logged of the fleet, and each member of its elections.
//!
//! `cargo test --profile host-test -p upcheck-e2e --test in_envoy fleet_etcd_members:: --
//! --nocapture` (as root, with `ip` and `iptables`; `make e2e` runs it).

use std::time::Duration;

use serde_json::Value;
use tokio::time::{sleep, sleep_until, Instant};
use upcheck_e2e::etcd::{Balancer, Etcd, Machine};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::INTERVAL;

use super::fleet_users::{prober_of_app2, probes_sent, Behind, Fleet, PER_SECOND};

/// How long users come.
const USERS_FOR: Duration = Duration::from_secs(15);

/// When member 0 is parted from its peers, from the start of the users.
const PARTITION_AT: Duration = Duration::from_secs(3);

/// How often the pages are read while users come.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);

/// How many times in all balancers are started again for their watches to sit on member 0.
const STARTS_AGAIN: u32 = 20;

/// Envoy's figure `stat` of each etcd member in `cluster` of balancer `b`, by member (`m0`,
/// `m1`, `m2`).
async fn by_member(
    b: &Balancer,
    etcd: &Etcd,
    cluster: &str,
    stat: &str,
) -> anyhow::Result<Vec<(String, u64)>> {
    let clients = etcd.clients();
    Ok(b.endpoint_stats(cluster, stat)
        .await?
        .into_iter()
        .map(
            |(host, n)| match clients.iter().position(|c| c.to_string() == host) {
                Some(i) => (format!("m{i}"), n),
                None => (host, n),
            },
        )
        .collect())
}

/// The members balancer `b`'s watch stream is on now, from its Envoy's open requests to the
/// watch's cluster.
async fn watch_on(b: &Balancer, etcd: &Etcd) -> anyhow::Result<Vec<String>> {
    let open = by_member(b, etcd, "etcd_grpc", "rq_active").await?;
    Ok(open
        .into_iter()
        .filter(|(_, n)| *n > 0)
        .map(|(m, _)| m)
        .collect())
}

/// The members balancer `b`'s watch is on, once it has opened one (within 10 s).
async fn watching(b: &Balancer, etcd: &Etcd) -> anyhow::Result<Vec<String>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let on = watch_on(b, etcd).await?;
        if !on.is_empty() || Instant::now() >= deadline {
            return Ok(on);
        }
        sleep(Duration::from_millis(100)).await;
    }
}

/// Starts balancers again (each new Envoy's round robin over the members begins at a member of
/// its own) until every balancer's watch sits on member 0, [`STARTS_AGAIN`] times at most in
/// all: the case the partition tests hardest, where a watch's member loses its leader while the
/// balancer's other calls go through the members that keep one. How many starts it took.
async fn watches_on_member_0(fleet: &mut Fleet) -> anyhow::Result<u32> {
    let mut again = 0;
    for b in 0..fleet.balancers.len() {
        while watching(&fleet.balancers[b], &fleet.etcd).await? != ["m0"] && again < STARTS_AGAIN {
            fleet.start_again(b, &Machine::default()).await?;
            again += 1;
        }
    }
    Ok(again)
}

/// This machine's wall clock as Envoy's log shows it (UTC), to read the logged lines against.
fn wall_clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (s, ms) = (now.as_secs() % 86_400, now.subsec_millis());
    format!("{:02}:{:02}:{:02}.{ms:03}", s / 3600, s / 60 % 60, s % 60)
}

/// A few of Envoy's statistics of the JSON gateway's cluster (`etcd`): how its calls and its
/// checks of the members fared, and the calls that timed out by member.
async fn etcd_cluster_stats(b: &Balancer, etcd: &Etcd) -> anyhow::Result<String> {
    const NAMES: [&str; 7] = [
        "upstream_rq_completed",
        "upstream_rq_5xx",
        "upstream_rq_timeout",
        "upstream_cx_connect_fail",
        "health_check.failure",
        "lb_healthy_panic",
        "membership_healthy",
    ];
    let stats = b.stats_and_page().await?;
    let said: Vec<String> = NAMES
        .iter()
        .map(|name| {
            let line = format!("cluster.etcd.{name}: ");
            let value = stats
                .lines()
                .find_map(|l| l.strip_prefix(&line))
                .unwrap_or("-");
            format!("{name} {value}")
        })
        .collect();
    let timeouts = by_member(b, etcd, "etcd", "rq_timeout").await?;
    Ok(format!(
        "{}, timed out by member {timeouts:?}",
        said.join(", ")
    ))
}

/// What one balancer's page said over the users, read every [`SAMPLE_EVERY`] from the partition.
#[derive(Debug, Default)]
struct Seen {
    /// The most its page said since its last usable read of etcd.
    read_ago_ms: u64,
    /// The longest its watch's revision stayed behind the one member 1 held a read earlier.
    behind: Duration,
    /// Since when it has been behind, while it is.
    behind_since: Option<Instant>,
    /// Reads of its page with the watch not in place.
    watch_down: u32,
    /// Reads of its page that said it had fallen back to local.
    local: u32,
    /// How long after app2 broke its page first said app2 is out of rotation.
    app2_out_after: Option<Duration>,
}

/// Two balancers sharing a three-member etcd whose leader, member 0, is parted from its peers
/// 3 s into 15 s of users, with both watches on it; app2 breaks `breaks_at` into the users:
/// what users and pages met, printed, and the bars held.
async fn one_member_parted(breaks_at: Duration, case: &str) -> anyhow::Result<()> {
    let etcd = Etcd::start_apart(3, 2).await?;
    // The harder case: the partition takes the leader, so the other two must elect one.
    etcd.make_leader(0).await?;
    let mut all = Fleet::with_etcd(etcd, &[Machine::default(), Machine::default()]).await?;
    let started_again = watches_on_member_0(&mut all).await?;
    let Fleet {
        app2,
        etcd,
        balancers: fleet,
        ..
    } = &all;
    let prober = prober_of_app2(fleet).await?;
    let mut watches_before = Vec::new();
    for b in fleet {
        watches_before.push(watch_on(b, etcd).await?);
    }
    let row = format!("fleet etcd | member partitioned | {case}");

    let mut behind = [Behind::default(), Behind::default()];
    let start = Instant::now();
    let total = PER_SECOND * USERS_FOR.as_secs() as u32;
    let parted_at = start + PARTITION_AT;
    let broken_at = start + breaks_at;
    let users = async {
        let mut partition = None;
        let mut broken = None;
        for i in 0..total {
            let at = start + Duration::from_secs(1) / PER_SECOND * i;
            sleep_until(at).await;
            if partition.is_none() && at >= parted_at {
                let made = etcd.partition()?;
                println!("{row} | parted at {}", wall_clock());
                partition = Some((made, Instant::now(), probes_sent(fleet).await?));
            }
            if broken.is_none() && at >= broken_at {
                app2.set_mode(Mode::Status(503));
                println!("{row} | app2 broken at {}", wall_clock());
                broken = Some(app2.counts().requests);
            }
            let b = i as usize % 2;
            let visit = fleet[b].visit().await;
            behind[b].take(&visit, i >= total / 2);
        }
        let reached_app2 = app2.counts().requests - broken.unwrap_or_default();
        let (partition, parted, sent) =
            partition.ok_or_else(|| anyhow::anyhow!("member 0 was never parted"))?;
        anyhow::Ok((partition, parted, sent, reached_app2))
    };
    let pages = async {
        let mut seen = [Seen::default(), Seen::default()];
        sleep_until(parted_at).await;
        // The revision member 1 held at the last read, and when.
        let mut held: Option<(i64, Instant)> = None;
        while Instant::now() < start + USERS_FOR {
            let now = Instant::now();
            let revision = etcd.revision_seen_by(1).await.ok();
            for (b, seen) in fleet.iter().zip(seen.iter_mut()) {
                let page = b.page_json().await?;
                let f = &page["fleet"];
                let ago = f["last_read_ago_ms"].as_u64().unwrap_or(u64::MAX);
                seen.read_ago_ms = seen.read_ago_ms.max(ago);
                seen.watch_down += u32::from(f["watch"]["live"] != true);
                seen.local += u32::from(f["local"] == true);
                let has = f["watch"]["revision"].as_i64().unwrap_or(0);
                match held {
                    Some((etcd_had, then)) if has < etcd_had => {
                        let since = *seen.behind_since.get_or_insert(then);
                        seen.behind = seen.behind.max(now - since);
                    }
                    _ => seen.behind_since = None,
                }
                if seen.app2_out_after.is_none()
                    && now >= broken_at
                    && page["backends"][1]["routable"] == false
                {
                    seen.app2_out_after = Some(now - broken_at);
                }
            }
            held = revision.map(|r| (r, now));
            sleep(SAMPLE_EVERY).await;
        }
        anyhow::Ok(seen)
    };
    let (users, seen) = tokio::join!(users, pages);
    let (partition, parted, sent_before, reached_app2) = users?;
    let seen = seen?;
    let intervals = parted.elapsed().as_secs_f64() / INTERVAL.as_secs_f64();
    let probes = (probes_sent(fleet).await? - sent_before) as f64 / intervals;

    let mut pages: Vec<Value> = Vec::new();
    let mut local = Vec::new();
    let mut watches_after = Vec::new();
    let mut stats = Vec::new();
    for b in fleet {
        pages.push(b.page_json().await?);
        local.push(b.counter("fleet_local").await?);
        watches_after.push(watch_on(b, etcd).await?);
        stats.push(etcd_cluster_stats(b, etcd).await?);
    }
    let leaders = [
        etcd.leader_seen_by(0).await.ok().flatten(),
        etcd.leader_seen_by(1).await.ok().flatten(),
    ];
    let member0_healthy = etcd.healthy(0).await;
    drop(partition);

    println!("{row} | balancers started again for their watches to sit on m0: {started_again}");
    for (b, seen_b) in seen.iter().enumerate() {
        let who = if b == prober {
            "app2's prober"
        } else {
            "the other"
        };
        let users = &behind[b];
        println!(
            "{row} | balancer {b} ({who}) | users failed {} of {} | slower than 1 s {} | app2's share over the second half {:.2}",
            users.failed,
            users.sent,
            users.slow,
            users.share()
        );
        println!(
            "{row} | balancer {b} | watch on {:?} before, {:?} after | behind etcd's revision for {:.2} s at most, while its page said it read {} ms ago at most | watch not in place in {} page reads, local in {} | app2 out {:.2} s after it broke | fleet_local at the end {}",
            watches_before[b],
            watches_after[b],
            seen_b.behind.as_secs_f64(),
            seen_b.read_ago_ms,
            seen_b.watch_down,
            seen_b.local,
            seen_b.app2_out_after.map_or(f64::NAN, |d| d.as_secs_f64()),
            local[b]
        );
        println!("{row} | balancer {b} | page's fleet: {}", pages[b]["fleet"]);
        println!("{row} | balancer {b} | Envoy's etcd cluster: {}", stats[b]);
        for line in fleet[b].log().lines().filter(|l| l.contains("fleet: ")) {
            let at = line.get(12..24).unwrap_or("");
            let said = line.split("fleet: ").nth(1).unwrap_or(line);
            println!("{row} | balancer {b} | logged at {at}: fleet: {said}");
        }
    }
    for m in 0..3 {
        let log = etcd.log(m);
        for line in log.lines().filter(|l| {
            l.contains("elected leader") || l.contains("lost leader") || l.contains("became leader")
        }) {
            println!("{row} | m{m} logged: {line}");
        }
    }
    println!("{row} | app2's probes an interval by the fleet since the partition: {probes:.2}; user requests reaching the broken app2: {reached_app2}");
    println!(
        "{row} | leader as member 0 / member 1 see it at the end: {:?} / {:?}; member 0 healthy: {member0_healthy}",
        leaders[0].map(|l| format!("m{l}")),
        leaders[1].map(|l| format!("m{l}"))
    );
    let out: Vec<bool> = pages
        .iter()
        .map(|p| p["backends"][1]["routable"] == false)
        .collect();
    let agree = out.iter().all(|o| *o);
    println!("{row} | both pages say app2 is out at the end: {agree} ({out:?})");

    anyhow::ensure!(behind.iter().all(|b| b.failed == 0), "{behind:?}");
    anyhow::ensure!(agree, "app2 out on both pages: {out:?}");
    anyhow::ensure!(
        local.iter().all(|l| *l == 0) && seen.iter().all(|s| s.local == 0),
        "a quorum of etcd stays reachable, so neither falls back to local: {local:?} {seen:?}"
    );
    anyhow::ensure!(
        leaders[1].is_some_and(|l| l != 0),
        "members 1 and 2 lead themselves: {leaders:?}"
    );
    anyhow::ensure!(
        watches_after
            .iter()
            .all(|on| !on.is_empty() && !on.iter().any(|m| m == "m0")),
        "each watch ends on a member with a leader: {watches_after:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_etcd_leader_parted_from_its_peers_costs_no_user_when_app2_breaks_while_the_watches_sit_on_it(
) -> anyhow::Result<()> {
    one_member_parted(
        PARTITION_AT + Duration::from_secs(1),
        "app2 breaks 1 s after",
    )
    .await
}
