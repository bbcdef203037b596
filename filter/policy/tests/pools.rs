//! Several configurations sharing one `vm_id`: two listeners, or an old configuration draining
//! after an update. Each backend is probed for the newest configuration that lists it, and a
//! pool never takes another pool's backends' state for its own.

mod support;

use support::*;
use upcheck_policy::tables::{ActiveTable, AnnounceTable};
use upcheck_policy::{Health, Pool};

fn prober(names: &[&str]) -> Pool {
    let mut pool = Pool::new(config(names, ""), secs(0), |_| ());
    pool.lease(true, secs(0), 1);
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
    let (mut a, mut b) = (prober(&["app1"]), prober(&["api1"]));
    let mut announcements = AnnounceTable::new();
    a.announce(&mut announcements, 1);
    b.announce(&mut announcements, 2);
    a.announced(&announcements, 1, secs(0));
    b.announced(&announcements, 2, secs(0));
    assert_eq!(probed(&mut a, secs(0)), ["app1"]);
    assert_eq!(probed(&mut b, secs(0)), ["api1"]);
}

#[test]
fn after_an_update_a_backend_that_stays_is_probed_once_for_the_newest_configuration() {
    let mut old = prober(&["app1", "app3"]);
    let mut announcements = AnnounceTable::new();
    old.announce(&mut announcements, 1);
    old.announced(&announcements, 1, secs(0));
    assert_eq!(probed(&mut old, secs(0)), ["app1", "app3"]);

    let mut new = prober(&["app1", "app2"]);
    new.announce(&mut announcements, 2);
    new.announced(&announcements, 2, secs(1));
    old.announced(&announcements, 1, secs(1));
    assert_eq!(probed(&mut new, secs(1)), ["app1", "app2"], "at once");
    assert_eq!(
        probed(&mut old, secs(11)),
        ["app3"],
        "the draining configuration probes only what the new one dropped"
    );
}

#[test]
fn a_pool_takes_probe_state_only_for_its_own_backends() {
    let mut a = prober(&["app1"]);
    let mut b = Pool::new(config(&["app1"], r#""routing":"cluster""#), secs(0), |_| ());
    let mut announcements = AnnounceTable::new();
    a.announce(&mut announcements, 1);
    a.announced(&announcements, 1, secs(0));
    b.announced(&announcements, 2, secs(0));
    let sent = a.tick(secs(0));
    a.probe_sent(sent.probes[0], 7, secs(0));
    a.probe_answered(7, Some(200), false, b"", secs(0));
    let mut published = a.active_table();
    let elsewhere: ActiveTable = prober(&["api1"]).active_table();
    published.extend(elsewhere);
    b.active_published(&published, secs(1));
    assert_eq!(b.members()[0].evidence.active.status, Health::Healthy);
    assert_eq!(b.members().len(), 1, "api1 is another pool's");
}
