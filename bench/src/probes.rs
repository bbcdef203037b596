//! Probes per backend per interval in a real Envoy, by worker count: one prober per process means
//! 1, whatever `--concurrency` is (Envoy runs a VM per worker plus the main thread's, and every
//! one of them ticks).

use crate::proxy::{Front, Proxy};
use anyhow::Result;
use std::path::Path;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, INTERVAL};
use upcheck_e2e::upstream::FakeUpstream;

/// Probes received per backend per interval (1 s) by two fake backends behind upcheck in an
/// Envoy with `workers` workers, counted over `intervals` intervals after the first rounds.
pub async fn per_interval(
    envoy: &Path,
    upcheck: &Path,
    workers: u32,
    intervals: u32,
    out: &Path,
) -> Result<f64> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let front = Front::Wasm {
        routing: Routing::Cluster,
        module: upcheck.to_owned(),
        config: fast_checks(&["app1", "app2"]),
    };
    let backends = [app1.name(), app2.name()].map(str::to_owned);
    let addrs = backends.into_iter().zip([app1.addr(), app2.addr()]);
    let _proxy = Proxy::start(
        envoy,
        &front,
        &addrs.collect::<Vec<_>>(),
        workers,
        None,
        out,
    )
    .await?;
    tokio::time::sleep(2 * INTERVAL).await;
    let count = || app1.counts().probes + app2.counts().probes;
    let before = count();
    tokio::time::sleep(INTERVAL * intervals).await;
    let probes = count() - before;
    Ok(probes as f64 / f64::from(intervals.max(1)) / 2.0)
}
