//! One prober per process. Envoy runs a VM per worker plus the main thread's, and each ticks; if
//! each probed, a backend would see five probes per interval with four workers. upcheck's lease
//! in shared data lets one VM probe for all, once per interval.

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::{fast_checks, INTERVAL};
use upcheck_e2e::upstream::FakeUpstream;

/// The probes each of two healthy backends receives in the first `intervals` intervals of an
/// Envoy with four workers and the scenarios' plugin configuration.
async fn probes_with_four_workers(intervals: u32) -> anyhow::Result<Vec<u64>> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let _envoy = Envoy::builder()
        .concurrency(4)
        .upstream(&app1)
        .upstream(&app2)
        .wasm_filter(fast_checks(&["app1", "app2"]))
        .start()
        .await?;
    // Probing starts at once: the first probe, then one per interval. Each backend's count is
    // taken `intervals` after its own first probe, however long Envoy took to say it was ready.
    let probes = FakeUpstream::probes_from_first(&[&app1, &app2], intervals * INTERVAL).await?;
    println!("probes in {intervals} intervals, 4 workers (app1, app2): {probes:?}");
    Ok(probes)
}

#[tokio::test]
async fn four_workers_send_each_backend_one_probe_per_interval_not_one_per_vm() -> anyhow::Result<()>
{
    let probes = probes_with_four_workers(10).await?;
    for (name, n) in ["app1", "app2"].into_iter().zip(probes) {
        // One prober: the first probe and one per interval, 10 or 11. A prober per VM (5 with 4
        // workers) would send 50 or more.
        assert!((10..=11).contains(&n), "{name} got {n} probes");
    }
    Ok(())
}

#[tokio::test]
async fn jitter_spreads_probes_around_the_interval_without_slowing_them_down() -> anyhow::Result<()>
{
    // The default jitter moves each probe by up to ±10% of the interval, so over 20 intervals the
    // count is 20 or 21. Probes are sent on the filter's 200 ms tick, so each is up to a tick
    // late; scheduled from a nominal slot rather than from the tick that sent the last one, that
    // lateness does not add up into a longer interval.
    let probes = probes_with_four_workers(20).await?;
    for (name, n) in ["app1", "app2"].into_iter().zip(probes) {
        assert!((20..=21).contains(&n), "{name} got {n} probes");
    }
    Ok(())
}
