//! Several configurations sharing one `vm_id`: two listeners, or an old configuration draining
//! after an update. Each backend is probed for the newest configuration that lists it, and a
//! pool never takes another pool's backends' state for its own.

use crate::support;

use support::*;
use upcheck_policy::tables::{ActiveTable, AnnounceTable};
use upcheck_policy::{Health, Pool, ProbeOutcome, Said};

/// A pool over the seed config for `names` at 0 s, holding the probing lease.
fn given_a_prober_of(names: &[&str]) -> Pool {
    let mut pool = Pool::new(config(names, ""), secs(0), |_| ());
    let _ = pool.lease(upcheck_policy::LeaseHeld::Here { seed: 1 }, secs(0));
    pool
}

fn probed(pool: &mut Pool, now: std::time::Duration) -> Vec<String> {
    let effects = pool.tick(now);
    effects
        .probes
        .iter()
        .map(|i| pool.members()[*i].name().to_owned())
        .collect()
}

#[test]
fn two_pools_with_different_backends_each_probe_their_own() {
    let (mut a, mut b) = (given_a_prober_of(&["app1"]), given_a_prober_of(&["api1"]));
    let mut announcements = AnnounceTable::new();
    a.announce(&mut announcements, 1);
    b.announce(&mut announcements, 2);
    let _ = a.announced(&announcements, 1, secs(0));
    let _ = b.announced(&announcements, 2, secs(0));
    assert_eq!(probed(&mut a, secs(0)), ["app1"]);
    assert_eq!(probed(&mut b, secs(0)), ["api1"]);
}

#[test]
fn after_an_update_a_backend_that_stays_is_probed_once_for_the_newest_configuration() {
    let mut old = given_a_prober_of(&["app1", "app3"]);
    let mut announcements = AnnounceTable::new();
    old.announce(&mut announcements, 1);
    let _ = old.announced(&announcements, 1, secs(0));
    assert_eq!(probed(&mut old, secs(0)), ["app1", "app3"]);

    let mut new = given_a_prober_of(&["app1", "app2"]);
    new.announce(&mut announcements, 2);
    let _ = new.announced(&announcements, 2, secs(1));
    let _ = old.announced(&announcements, 1, secs(1));
    assert_eq!(probed(&mut new, secs(1)), ["app1", "app2"], "at once");
    assert_eq!(
        probed(&mut old, secs(11)),
        ["app3"],
        "the draining configuration probes only what the new one dropped"
    );
}

#[test]
fn a_pool_takes_probe_state_only_for_its_own_backends() {
    let mut a = given_a_prober_of(&["app1"]);
    let mut b = Pool::new(config(&["app1"], r#""routing":"cluster""#), secs(0), |_| ());
    let mut announcements = AnnounceTable::new();
    a.announce(&mut announcements, 1);
    let _ = a.announced(&announcements, 1, secs(0));
    let _ = b.announced(&announcements, 2, secs(0));
    let sent = a.tick(secs(0));
    let _ = a.probe_sent(sent.probes[0], 7, secs(0));
    let _ = a.probe_answered(7, answer_from_backend(200), secs(0));
    let mut published = a.active_table();
    let elsewhere: ActiveTable = given_a_prober_of(&["api1"]).active_table();
    published.extend(elsewhere);
    let _ = b.active_published(&published, secs(1));
    assert_eq!(b.members()[0].evidence.active.status, Health::Healthy);
    assert_eq!(b.members().len(), 1, "api1 is another pool's");
}

#[test]
fn a_status_page_pool_shows_what_the_traffic_pool_shares_and_asks_for_nothing() {
    let names = ["app1", "app2", "app3"];
    let mut traffic = pool(&names);
    for name in names {
        let outcome = match name {
            "app2" => ProbeOutcome::Soft(Said::Status(502)),
            _ => ProbeOutcome::Pass,
        };
        traffic.probe(name, outcome, secs(0));
    }
    for at in [1, 2, 3] {
        traffic.request("app1", answered(503), secs(at));
    }
    assert_eq!(
        traffic.routable(),
        ["app3"],
        "app2 fails its probe, app1 ejected"
    );

    let mut page = Pool::new(config(&names, r#""role":"status_page""#), secs(0), |_| ());
    for now in [secs(4), secs(12)] {
        traffic.tick(now);
        // As the module's status page does on every request: both tables read anew, then the
        // history of changes.
        let mut effects = page.active_published(&traffic.active_table(), now);
        effects.extend(page.passive_published(&traffic.table, now));
        let _ = page.history_published(&traffic.history);
        assert!(effects.is_empty(), "at {now:?}: {effects:?}");
        assert_eq!(
            upcheck_policy::page::json(&page, None, now),
            upcheck_policy::page::json(&traffic.pool, None, now),
            "at {now:?}"
        );
    }
    assert_eq!(
        traffic.routable(),
        ["app1", "app3"],
        "app1's failures expired by 12 s, on both"
    );
    assert_eq!(
        page.history().len(),
        5,
        "three first probes, app1 ejected and back: {:#?}",
        page.history()
    );
}
