//! What the fleet fault tests share: two backends, one etcd and two real Envoys written by
//! `upcheck envoy --etcd` ([`Fleet`]), users alternating between the balancers, and what they met
//! behind each ([`Behind`]).

use std::time::Duration;

use serde_json::{json, Value};
use tokio::time::{sleep, Instant};
use upcheck_e2e::etcd::{plugin, Balancer, Etcd, Machine, Visit};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::upstream::FakeUpstream;

/// Users a second, over both balancers.
pub const PER_SECOND: u32 = 20;

/// What a user calls slow.
pub const SLOW: Duration = Duration::from_secs(1);

/// Two backends serving, one etcd, and balancers sharing it with a 3 s lease.
pub struct Fleet {
    pub app1: FakeUpstream,
    pub app2: FakeUpstream,
    pub etcd: Etcd,
    pub balancers: Vec<Balancer>,
    /// The balancers' plugin configuration.
    shared: Value,
}

impl Fleet {
    /// Starts the fleet on `machines`, one balancer on each ([`Machine`]), with an etcd of one
    /// member, beside other tests' Envoys: the fault tests' bars are counts
    /// ([`Etcd::start_beside`]).
    pub async fn start(machines: &[Machine]) -> anyhow::Result<Fleet> {
        let envoys = u32::try_from(machines.len())?;
        Fleet::with_etcd(Etcd::start_beside(1, envoys).await?, machines).await
    }

    /// [`Fleet::start`] sharing `etcd`.
    pub async fn with_etcd(etcd: Etcd, machines: &[Machine]) -> anyhow::Result<Fleet> {
        let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
        let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
        let shared = plugin(
            &[&app1, &app2],
            Some(json!({"cluster": "etcd", "lease_ttl": "3s"})),
        );
        let mut balancers = Vec::new();
        for machine in machines {
            balancers.push(Balancer::start_on(&shared, Some(&etcd), machine).await?);
        }
        Ok(Fleet {
            app1,
            app2,
            etcd,
            balancers,
            shared,
        })
    }

    /// Starts balancer `b` again on `machine`: its Envoy killed, a new one started in its place
    /// (a new lease, and Envoy's round robin over etcd's members from a member of its own).
    pub async fn start_again(&mut self, b: usize, machine: &Machine) -> anyhow::Result<()> {
        let old = self
            .balancers
            .get_mut(b)
            .ok_or_else(|| anyhow::anyhow!("no balancer {b}"))?;
        old.kill();
        *old = Balancer::start_on(&self.shared, Some(&self.etcd), machine).await?;
        Ok(())
    }
}

/// What users met behind one balancer.
#[derive(Debug, Default)]
pub struct Behind {
    pub sent: u32,
    pub failed: u32,
    pub slow: u32,
    /// Answers over the second half, and app2's among them.
    pub late: u32,
    pub late_app2: u32,
}

impl Behind {
    /// Counts `visit`, in the second half of the users if `second_half`.
    pub fn take(&mut self, visit: &Visit, second_half: bool) {
        self.sent += 1;
        self.failed += u32::from(!visit.ok);
        self.slow += u32::from(visit.took > SLOW);
        if second_half && visit.ok {
            self.late += 1;
            self.late_app2 += u32::from(visit.by.as_deref() == Some("app2"));
        }
    }

    /// app2's share of the answers over the second half.
    pub fn share(&self) -> f64 {
        f64::from(self.late_app2) / f64::from(self.late.max(1))
    }
}

/// Waits (at most 20 s) until one of `fleet` holds app2's probe duty, as each status page says,
/// and both show both backends healthy: the position of app2's prober.
pub async fn prober_of_app2(fleet: &[Balancer]) -> anyhow::Result<usize> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut here = Vec::new();
        let mut healthy = true;
        for b in fleet {
            let page = b.page_json().await?;
            let backends = page["backends"].as_array().cloned().unwrap_or_default();
            healthy &= backends.len() == 2 && backends.iter().all(|b| b["routable"] == true);
            here.push(
                backends
                    .get(1)
                    .is_some_and(|app2| app2["probe_duty"] == "here"),
            );
        }
        if healthy && here.iter().filter(|h| **h).count() == 1 {
            return Ok(here.iter().position(|h| *h).unwrap_or(0));
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "not settled: app2's duty here {here:?}"
        );
        sleep(Duration::from_millis(200)).await;
    }
}

/// The probes of app2 the balancers of `fleet` sent so far, in all.
pub async fn probes_sent(fleet: &[Balancer]) -> anyhow::Result<u64> {
    let mut sent = 0;
    for b in fleet {
        sent += b.counter("app2.probes").await?;
    }
    Ok(sent)
}
