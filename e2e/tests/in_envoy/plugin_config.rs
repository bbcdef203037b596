//! The plugin configuration changes while Envoy runs: the listeners file is replaced, Envoy
//! updates the listener in place and upcheck is configured anew. Needs upcheck.wasm (`UPCHECK_WASM`).

use std::time::Duration;

use serde_json::json;
use upcheck_e2e::envoy::Envoy;
use upcheck_e2e::mode::Mode;
use upcheck_e2e::replay::Replay;
use upcheck_e2e::upstream::FakeUpstream;

fn pool(names: &[&str]) -> serde_json::Value {
    let upstreams: Vec<_> = names.iter().map(|name| json!({"name": name})).collect();
    json!({
        "upstreams": upstreams,
        "health_checks": {"active": {"path": "/up", "interval": "1s", "timeout": "500ms"}},
    })
}

#[tokio::test]
async fn a_changed_plugin_configuration_in_the_listeners_file_takes_effect_without_a_restart(
) -> anyhow::Result<()> {
    let app1 = FakeUpstream::start("app1", Mode::Ok).await?;
    let app2 = FakeUpstream::start("app2", Mode::Ok).await?;
    let mut envoy = Envoy::builder()
        .concurrency(2)
        .upstream(&app1)
        .upstream(&app2)
        .wasm_filter(pool(&["app1"]))
        .start()
        .await?;
    let pid = envoy.pid();
    let replay = Replay::new(envoy.url("/"), 20, Duration::from_secs(1));

    let before = replay.run().await?;
    assert_eq!(before.failures(), 0, "{before}");
    assert_eq!((app1.counts().requests, app2.counts().requests), (20, 0));

    envoy.set_plugin_config(pool(&["app2"])).await?;

    let after = replay.run().await?;
    assert_eq!(after.failures(), 0, "{after}");
    assert_eq!((app1.counts().requests, app2.counts().requests), (20, 20));
    assert_eq!(envoy.pid(), pid);
    assert_eq!(
        envoy
            .stat("listener_manager.listener_in_place_updated")
            .await?,
        2,
        "the users' listener and its status page listener"
    );
    let page = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(envoy.status_url("/upcheck/status.json")?)
        .send()
        .await?
        .text()
        .await?;
    let page: serde_json::Value = serde_json::from_str(&page)?;
    assert_eq!(page["backends"][0]["name"], "app2", "{page}");
    assert_eq!(page["backends"].as_array().map(Vec::len), Some(1), "{page}");
    Ok(())
}
