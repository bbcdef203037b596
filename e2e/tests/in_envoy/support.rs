//! What several scenarios start from, so each states only what it does differently.

use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::envoy_config::Routing;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::upstream::FakeUpstream;

/// Starts app1 in `first` mode and app2 in `second` mode, then the scenarios' Envoy in front of
/// both in `routing` ([`Envoy::scenario`]), and waits until it serves: `(app1, app2, envoy)`.
pub async fn two_backends(
    routing: Routing,
    first: Mode,
    second: Mode,
) -> anyhow::Result<(FakeUpstream, FakeUpstream, Envoy)> {
    let app1 = FakeUpstream::start("app1", first).await?;
    let app2 = FakeUpstream::start("app2", second).await?;
    let envoy = Envoy::scenario(routing, &[&app1, &app2]).start().await?;
    Ok((app1, app2, envoy))
}
