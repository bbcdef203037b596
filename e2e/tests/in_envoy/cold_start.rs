//! Cold start: Envoy comes up with app1 and a hanging app2 both configured and users already
//! knocking. Nothing is known about either backend yet, so upcheck holds each request back until
//! the first probe answers (at most one probe timeout), then sends it to a backend that passed.
//!
//! app1 answers after 200 ms, its probe included, so users certainly arrive before any verdict:
//! without the wait they would be spread over both unknown backends, and half would hang on app2.

use std::time::Duration;

use crate::support::two_backends;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::plugin::RATE;
use upcheck_e2e::replay::Replay;

#[tokio::test]
async fn users_arriving_at_cold_start_never_reach_a_hanging_backend() -> anyhow::Result<()> {
    let (app1, app2, envoy) = two_backends(
        Routing::Cluster,
        Mode::Slow(Duration::from_millis(200)),
        Mode::Hang,
    )
    .await?;

    // From the moment the listener is up: the first probes are still out.
    let report = Replay::new(envoy.url("/"), RATE, Duration::from_secs(4))
        .connection_per_request()
        .run()
        .await?;
    println!("cold start, app2 hanging: {report}");
    println!("first request: {:?}", report.samples[0]);

    assert_eq!(report.failures(), 0, "{report}");
    assert_eq!(app1.counts().requests, 160);
    assert_eq!(app2.counts().requests, 0);
    Ok(())
}
