//! What the route header carries in host routing: the pick's address, then the address a retry
//! is to go to, the backend whose turn comes next, whatever the weights.

use std::time::Duration;
use upcheck_host_tests::{Behaviour, Host, HostOptions, UPCHECK_WASM};

const WEIGHTED: &str = r#"{"routing":"host","upstreams":[
    {"name":"app1","address":"127.0.0.1:3001","weight":2},
    {"name":"app2","address":"127.0.0.1:3002","weight":2},
    {"name":"app3","address":"127.0.0.1:3003"}]}"#;

#[test]
fn each_request_names_its_pick_and_then_the_next_other_backend_in_the_rotation() {
    let mut host = Host::from_file(UPCHECK_WASM, HostOptions::default())
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    for app in ["app1", "app2", "app3"] {
        host.upstream(app).path("/up", Behaviour::status(200));
    }
    host.start(WEIGHTED).unwrap_or_else(|e| panic!("{e}"));
    let traffic = host
        .traffic(20, Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut checked = 0;
    let mut retries_of_app2 = std::collections::BTreeSet::new();
    for worker in 1..=2 {
        let headers: Vec<(&str, &str)> = traffic
            .requests
            .iter()
            .filter(|r| r.worker == worker)
            .filter_map(|r| r.route_header.as_deref())
            .map(|h| h.split_once(',').unwrap_or((h, "")))
            .collect();
        for pair in headers.windows(2) {
            let [(pick, retry), (next, _)] = pair else {
                continue;
            };
            assert_ne!(pick, retry, "a retry goes elsewhere: {pair:?}");
            if next != pick {
                assert_eq!(retry, next, "the retry goes to the next turn's backend");
            }
            if *pick == "127.0.0.1:3002" {
                retries_of_app2.insert(*retry);
            }
            checked += 1;
        }
    }
    assert!(checked >= 150, "routed: {checked}");
    // Weights 2, 2, 1: rounds of app1 app2 app3, then app1 app2; so app2's retry is app3 in
    // one round and app1 in the other.
    assert_eq!(
        retries_of_app2.into_iter().collect::<Vec<_>>(),
        ["127.0.0.1:3001", "127.0.0.1:3003"],
        "app2's retry follows the rotation"
    );
}
