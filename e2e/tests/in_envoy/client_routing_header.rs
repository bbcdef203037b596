//! A client can never choose a backend. Envoy routes on `x-upcheck-upstream`, so a client that
//! sends it itself could reach any cluster Envoy knows (`routing: cluster`) or any address in the
//! pool cluster (`routing: host`), including a backend that is not in upcheck's pool at all.
//! upcheck removes every copy, whatever its case, before setting its own pick.
//!
//! The requests are written by hand ([`upcheck_e2e::raw_http`]): an HTTP client library would
//! normalise the header's case and might merge the two copies, which are the point here.

use std::collections::BTreeMap;

use upcheck_e2e::envoy::{Envoy, EnvoyBuilder};
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, fast_host_checks};
use upcheck_e2e::raw_http::status_of;
use upcheck_e2e::upstream::FakeUpstream;

/// app1 and app2 in upcheck's pool; the teapot is known to Envoy (a cluster, and in host
/// routing also an address in the pool cluster) but not to upcheck.
struct Fleet {
    app1: FakeUpstream,
    app2: FakeUpstream,
    teapot: FakeUpstream,
}

impl Fleet {
    async fn start() -> anyhow::Result<Fleet> {
        Ok(Fleet {
            app1: FakeUpstream::start("app1", Mode::Ok).await?,
            app2: FakeUpstream::start("app2", Mode::Ok).await?,
            teapot: FakeUpstream::start("teapot", Mode::Status(418)).await?,
        })
    }

    /// Envoy with 2 workers and every backend of the fleet.
    fn envoy(&self) -> EnvoyBuilder {
        Envoy::builder()
            .concurrency(2)
            .upstream(&self.app1)
            .upstream(&self.app2)
            .upstream(&self.teapot)
    }

    /// From the start (requests held at cold start included), 20 rounds of the client naming
    /// `teapot` in the routing header: in lower case, in mixed case, and twice. Asserts every
    /// request reached app1 or app2, and neither saw the header.
    async fn never_reaches_the_teapot(&self, envoy: &Envoy, teapot: &str) -> anyhow::Result<()> {
        let (lower, mixed, upper) = (
            format!("x-upcheck-upstream: {teapot}"),
            format!("X-Upcheck-Upstream: {teapot}"),
            format!("X-UPCHECK-UPSTREAM: {teapot}"),
        );
        let attempts: [&[&str]; 3] = [&[&lower], &[&mixed], &[&lower, &upper]];
        let mut statuses = Vec::new();
        for _ in 0..20 {
            for headers in attempts {
                statuses.push(status_of(envoy.addr(), headers).await?);
            }
        }
        let mut tally = BTreeMap::new();
        for status in &statuses {
            *tally.entry(status).or_insert(0) += 1;
        }
        println!(
            "routing header {teapot:?} from the client, 3 forms x 20: statuses {tally:?}, teapot {:?}",
            self.teapot.counts()
        );

        assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
        assert_eq!(self.teapot.counts().requests, 0);
        let (app1, app2) = (self.app1.counts(), self.app2.counts());
        assert_eq!(app1.requests + app2.requests, 60);
        assert_eq!(app1.with_routing_header + app2.with_routing_header, 0);
        Ok(())
    }
}

#[tokio::test]
async fn a_client_naming_a_cluster_in_the_routing_header_never_reaches_it() -> anyhow::Result<()> {
    let fleet = Fleet::start().await?;
    let envoy = fleet
        .envoy()
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    fleet.never_reaches_the_teapot(&envoy, "teapot").await
}

#[tokio::test]
async fn a_client_naming_an_address_in_the_pool_never_reaches_it() -> anyhow::Result<()> {
    let fleet = Fleet::start().await?;
    let envoy = fleet
        .envoy()
        .routing(Routing::Host {
            per_try_timeout: std::time::Duration::from_millis(500),
        })
        .wasm_filter(fast_host_checks(&[&fleet.app1, &fleet.app2]))
        .start()
        .await?;
    let teapot = fleet.teapot.addr().to_string();
    fleet.never_reaches_the_teapot(&envoy, &teapot).await
}
