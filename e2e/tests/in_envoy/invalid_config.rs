//! An invalid plugin configuration stops Envoy at start-up with one log line naming the field,
//! because the operator reading the log has nothing else to go on.
//!
//! The listener is static here: in a static listener a configuration upcheck rejects fails the
//! start. Served over LDS (as the other scenarios do) Envoy would only reject the update and stay
//! up without the listener.

use serde_json::json;
use upcheck_e2e::envoy::{Envoy, EnvoyBuilder};
use upcheck_e2e::mode::Mode;
use upcheck_e2e::upstream::FakeUpstream;

/// The field `health_checks.passive.max_fails` set to 0, which can never eject anything.
fn no_ejections(app1: &FakeUpstream) -> EnvoyBuilder {
    Envoy::builder()
        .concurrency(2)
        .upstream(app1)
        .wasm_filter(json!({
            "upstreams": [{"name": "app1"}],
            "health_checks": {"passive": {"fail_duration": "2s", "max_fails": 0}},
        }))
}

const FIELD: &str = "health_checks.passive.max_fails";

#[tokio::test]
async fn envoy_refuses_to_start_with_an_invalid_plugin_configuration_and_names_the_field(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let exited = no_ejections(&app1).run_static(false).await?;
    let line = exited
        .output
        .lines()
        .find(|l| l.contains("invalid configuration"));
    println!("envoy (serve) {}: {line:?}", exited.status);
    assert!(!exited.status.success());
    assert!(line.is_some_and(|l| l.contains(FIELD)), "{}", exited.output);
    assert_eq!(app1.counts().probes, 0);
    Ok(())
}

#[tokio::test]
async fn envoy_validate_rejects_an_invalid_plugin_configuration_and_names_the_field(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let exited = no_ejections(&app1).run_static(true).await?;
    let line = exited
        .output
        .lines()
        .find(|l| l.contains("invalid configuration"));
    println!("envoy --mode validate {}: {line:?}", exited.status);
    assert!(!exited.status.success());
    assert!(line.is_some_and(|l| l.contains(FIELD)), "{}", exited.output);
    Ok(())
}
