//! The fleet against a small etcd of its own: leases that expire, create-if-absent, ranges, the
//! gateway's answers as etcd 3.4 gives them; several balancers on one virtual clock.

use super::publish::Published;
use super::*;
use crate::active::{Health, ProbeOutcome};
use crate::outcome::About;
use crate::passive::Remembered;
use crate::tables::tagged;
use serde_json::Value;
use std::collections::BTreeMap;
use upcheck_config::fleet::Fleet as Settings;

pub(crate) const TICK: Duration = Duration::from_millis(200);
pub(crate) const S: Duration = Duration::from_secs(1);

/// An etcd that answers the gateway's requests as etcd 3.4 does, for what the fleet asks.
#[derive(Default)]
pub(crate) struct Etcd {
    kv: BTreeMap<String, (Vec<u8>, i64)>,
    leases: BTreeMap<i64, (Duration, Time)>,
    next: i64,
    down: bool,
    requests: usize,
    /// Requests by path, answered or refused while down.
    by_path: BTreeMap<&'static str, usize>,
    /// The store's revision: one more at each change.
    revision: i64,
    /// Every change since the start, with the revision it made: what a watch is sent.
    changes: Vec<(i64, watch::KeyChange)>,
}

fn b64(v: &Value) -> Vec<u8> {
    gateway::unbase64(v.as_str().unwrap_or("")).unwrap()
}

fn text(v: &Value) -> String {
    String::from_utf8(b64(v)).unwrap()
}

fn num(v: &Value) -> i64 {
    v.as_str().unwrap_or("0").parse().unwrap()
}

impl Etcd {
    /// Writes `value` at `key`, living by `lease`, as another writer would.
    pub(crate) fn put(&mut self, key: &str, value: &[u8], lease: i64) {
        self.revision += 1;
        self.changes.push((
            self.revision,
            watch::KeyChange::Put(gateway::KeyValue {
                key: key.to_owned(),
                value: value.to_vec(),
                lease,
            }),
        ));
        self.kv.insert(key.to_owned(), (value.to_vec(), lease));
    }

    /// Deletes `key`, as etcd does when asked or when its lease expires.
    fn delete(&mut self, key: &str) {
        if self.kv.remove(key).is_some() {
            self.revision += 1;
            self.changes
                .push((self.revision, watch::KeyChange::Delete(key.to_owned())));
        }
    }

    /// The changes after revision `from` under `prefix`, and the revision they bring the store
    /// to: what a watch from `from + 1` is sent next.
    pub(crate) fn changes_after(&self, from: i64, prefix: &str) -> (Vec<watch::KeyChange>, i64) {
        let changes = self
            .changes
            .iter()
            .filter(|(r, c)| *r > from && c.key().starts_with(prefix))
            .map(|(_, c)| c.clone())
            .collect();
        (changes, self.revision)
    }

    /// How many requests went to `path` (`watch`: streams opened).
    pub(crate) fn asked(&self, path: &str) -> usize {
        self.by_path.get(path).copied().unwrap_or(0)
    }

    /// How many failures the value a balancer (`lease`, in hex) published for `backend` lists.
    pub(crate) fn failures_of(&self, lease: &str, backend: &str) -> usize {
        let key = format!("upcheck/v1/failures/{lease}/{backend}");
        let value = self
            .kv
            .get(&key)
            .map(|(v, _)| v.clone())
            .unwrap_or_default();
        // The head, then when it was written (`@…`), then the failures.
        String::from_utf8(value).unwrap().split(' ').skip(2).count()
    }

    /// The keys under `prefix`, with the lease each lives by.
    pub(crate) fn under(&self, prefix: &str) -> Vec<(String, i64)> {
        self.kv
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, (_, lease))| (k.clone(), *lease))
            .collect()
    }

    /// How many leases were granted.
    pub(crate) fn leases_granted(&self) -> usize {
        self.by_path.get("/v3/lease/grant").copied().unwrap_or(0)
    }

    fn expire(&mut self, now: Time) {
        let gone: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            self.leases.remove(&id);
            let keys: Vec<String> = self
                .kv
                .iter()
                .filter(|(_, (_, lease))| *lease == id)
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                self.delete(&key);
            }
        }
    }

    pub(crate) fn answer(&mut self, request: &Request, now: Time) -> (Option<u16>, Vec<u8>) {
        *self.by_path.entry(request.path).or_default() += 1;
        // etcd's store starts at revision 1.
        self.revision = self.revision.max(1);
        if self.down {
            return (Some(503), b"upstream connect error".to_vec());
        }
        self.requests += 1;
        self.expire(now);
        let body: Value = serde_json::from_str(&request.body).unwrap();
        let ok = |v: Value| (Some(200), v.to_string().into_bytes());
        match request.path {
            "/v3/lease/grant" => {
                self.next += 7_000_000_000_000_001;
                let ttl = num(&body["TTL"]);
                let d = Duration::from_secs(ttl as u64);
                self.leases.insert(self.next, (d, now + d));
                ok(
                    serde_json::json!({"header": {}, "ID": self.next.to_string(), "TTL": ttl.to_string()}),
                )
            }
            "/v3/lease/keepalive" => {
                let id = num(&body["ID"]);
                match self.leases.get_mut(&id) {
                    Some((ttl, until)) => {
                        *until = now + *ttl;
                        ok(
                            serde_json::json!({"result": {"ID": id.to_string(), "TTL": ttl.as_secs().to_string()}}),
                        )
                    }
                    None => ok(serde_json::json!({"result": {"ID": id.to_string()}})),
                }
            }
            "/v3/kv/put" => {
                let lease = num(&body["lease"]);
                if lease != 0 && !self.leases.contains_key(&lease) {
                    return (
                        Some(404),
                        br#"{"error":"etcdserver: requested lease not found","code":5}"#.to_vec(),
                    );
                }
                self.put(&text(&body["key"]), &b64(&body["value"]), lease);
                ok(serde_json::json!({"header": {}}))
            }
            "/v3/kv/txn" => {
                let compare = &body["compare"][0];
                let key = text(&compare["key"]);
                let holds = match compare["target"].as_str() {
                    Some("CREATE") => !self.kv.contains_key(&key),
                    Some("VALUE") => {
                        self.kv.get(&key).map(|(v, _)| v.clone()) == Some(b64(&compare["value"]))
                    }
                    other => panic!("compare {other:?}"),
                };
                if holds {
                    let success = &body["success"][0];
                    if let Some(put) = success.get("request_put") {
                        self.put(&text(&put["key"]), &b64(&put["value"]), num(&put["lease"]));
                    } else if let Some(delete) = success.get("request_delete_range") {
                        self.delete(&text(&delete["key"]));
                    }
                    ok(serde_json::json!({"header": {}, "succeeded": true}))
                } else {
                    ok(serde_json::json!({"header": {}}))
                }
            }
            "/v3/kv/range" => {
                let from = text(&body["key"]);
                let to = text(&body["range_end"]);
                let kvs: Vec<Value> = self
                    .kv
                    .range(from..to)
                    .map(|(k, (v, lease))| {
                        serde_json::json!({"key": gateway::base64(k.as_bytes()), "value": gateway::base64(v), "lease": lease.to_string()})
                    })
                    .collect();
                let header = serde_json::json!({"revision": self.revision.to_string()});
                if kvs.is_empty() {
                    ok(serde_json::json!({ "header": header }))
                } else {
                    ok(
                        serde_json::json!({"header": header, "kvs": kvs, "count": kvs.len().to_string()}),
                    )
                }
            }
            other => panic!("{other}"),
        }
    }
}

/// One balancer: its fleet, and the probe state of each backend as it last probed it.
pub(crate) struct Balancer {
    pub(crate) fleet: FleetPart,
    pub(crate) up: bool,
    pub(crate) token: u32,
    /// The watch's stream, and the revision the messages sent on it reached.
    pub(crate) stream: Option<(u32, i64)>,
    /// How far its clock is ahead of etcd's and the others' (behind when negative).
    pub(crate) skew: Skew,
}

/// A balancer's clock ahead (`ahead`) or behind the others by `by`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Skew {
    pub(crate) by: Duration,
    pub(crate) ahead: bool,
}

impl Balancer {
    /// The time on its clock when it is `now` on etcd's.
    pub(crate) fn clock(&self, now: Time) -> Time {
        match self.skew.ahead {
            true => now + self.skew.by,
            false => now.saturating_sub(self.skew.by),
        }
    }
}

pub(crate) fn settings() -> Settings {
    Settings {
        cluster: "etcd".into(),
        ..Settings::default()
    }
}

pub(crate) fn probed(at: Time) -> ActiveHealth {
    let mut health = ActiveHealth::new(Duration::ZERO);
    health.status = Health::Healthy;
    health.last = Some((at, ProbeOutcome::Pass));
    health
}

pub(crate) fn keys(m: usize) -> Vec<(String, ActiveHealth)> {
    (0..m)
        .map(|i| (format!("app{i}@app{i}"), probed(Duration::ZERO)))
        .collect()
}

/// Runs `balancers` against `etcd` from `from` for `ticks` ticks; every call is answered at once.
pub(crate) fn run(
    etcd: &mut Etcd,
    balancers: &mut [Balancer],
    own: &[(String, ActiveHealth)],
    from: Time,
    ticks: u32,
) -> Time {
    let mut now = from;
    for _ in 0..ticks {
        for at in 0..balancers.len() {
            let Some(b) = balancers.get_mut(at).filter(|b| b.up) else {
                continue;
            };
            let clock = b.clock(now);
            for request in b.fleet.tick(clock, own) {
                b.token += 1;
                b.fleet.sent(request.call.clone(), b.token);
                let (status, body) = etcd.answer(&request, now);
                assert!(b.fleet.answered(b.token, status, &body, clock));
            }
            b.watch(etcd, now);
            // Every change goes out on every stream as soon as it is made.
            for b in balancers.iter_mut().filter(|b| b.up) {
                b.hear(etcd, now);
            }
        }
        now += TICK;
    }
    now
}

impl Balancer {
    /// Opens the watch the balancer asks for, as etcd does: `created`, then what changed.
    pub(crate) fn watch(&mut self, etcd: &mut Etcd, now: Time) {
        if etcd.down {
            if let Some((token, _)) = self.stream.take() {
                self.fleet.watch_closed(token, 14);
            }
            return;
        }
        let now = self.clock(now);
        let Some(open) = self.fleet.watch_due(now) else {
            return;
        };
        *etcd.by_path.entry("watch").or_default() += 1;
        self.token += 1;
        self.fleet.watch_opened(self.token, now);
        let from = self
            .fleet
            .watch()
            .map(|f| f.revision)
            .expect("a watch was due");
        assert_eq!(open.message, watch::request("upcheck/", from + 1));
        self.stream = Some((self.token, from));
        let created = watch::message(&watch::Heard::Created);
        assert!(self.fleet.watch_message(self.token, &created, now).keep);
    }

    /// Sends the stream what changed since it last heard.
    pub(crate) fn hear(&mut self, etcd: &Etcd, now: Time) {
        let Some((token, heard)) = self.stream else {
            return;
        };
        let (changes, revision) = etcd.changes_after(heard, "upcheck/");
        if changes.is_empty() {
            return;
        }
        let message = watch::message(&watch::Heard::Changes { revision, changes });
        self.stream = Some((token, revision));
        if !self
            .fleet
            .watch_message(token, &message, self.clock(now))
            .keep
        {
            self.stream = None;
        }
    }
}

pub(crate) fn here(b: &Balancer, own: &[(String, ActiveHealth)]) -> Vec<bool> {
    own.iter()
        .map(|(k, _)| b.fleet.duty(k) == Duty::Here)
        .collect()
}

pub(crate) fn balancers(n: usize, now: Time) -> Vec<Balancer> {
    balancers_with(settings(), n, now)
}

/// The settings of balancers that follow the prefix with a watch.
pub(crate) fn watching() -> Settings {
    Settings {
        watch_cluster: Some("etcd_grpc".into()),
        ..settings()
    }
}

pub(crate) fn balancers_with(settings: Settings, n: usize, now: Time) -> Vec<Balancer> {
    (0..n)
        .map(|_| Balancer {
            fleet: FleetPart::new(settings.clone(), now),
            up: true,
            token: 0,
            stream: None,
            skew: Skew::default(),
        })
        .collect()
}

/// For each backend, how many balancers probe it.
fn probers(balancers: &[Balancer], own: &[(String, ActiveHealth)]) -> Vec<usize> {
    (0..own.len())
        .map(|i| balancers.iter().filter(|b| b.up && here(b, own)[i]).count())
        .collect()
}

#[test]
fn each_backend_is_probed_by_exactly_one_of_three_balancers_and_the_duties_spread() {
    let mut etcd = Etcd::default();
    let own = keys(6);
    let mut fleet = balancers(3, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 20);
    assert_eq!(probers(&fleet, &own), vec![1; 6]);
    let held: Vec<usize> = fleet
        .iter()
        .map(|b| here(b, &own).iter().filter(|h| **h).count())
        .collect();
    assert_eq!(held, vec![2, 2, 2], "spread over the balancers");
    assert!(fleet
        .iter()
        .all(|b| b.fleet.balancers() == 3 && !b.fleet.local()));
    // Steady: it stays so.
    run(&mut etcd, &mut fleet, &own, now, 50);
    assert_eq!(probers(&fleet, &own), vec![1; 6]);
}

#[test]
fn a_balancer_that_starts_late_gets_its_share_from_the_others() {
    let mut etcd = Etcd::default();
    let own = keys(4);
    let mut fleet = balancers(1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    assert_eq!(
        here(&fleet[0], &own),
        vec![true; 4],
        "alone, it holds them all"
    );
    fleet.push(Balancer {
        fleet: FleetPart::new(settings(), now),
        up: true,
        token: 0,
        stream: None,
        skew: Skew::default(),
    });
    run(&mut etcd, &mut fleet, &own, now, 20);
    assert_eq!(probers(&fleet, &own), vec![1; 4]);
    let late = here(&fleet[1], &own).iter().filter(|h| **h).count();
    assert_eq!(
        late, 2,
        "duties given back one a tick, taken by the newcomer"
    );
}

#[test]
fn a_holders_results_reach_the_others_and_nobody_else_is_trusted_with_them() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers(2, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    let holder = fleet.iter().position(|b| here(b, &own)[0]).unwrap();
    let other = 1 - holder;
    // The holder probes app0 and sees it fail; it publishes at its next tick.
    let mut mine = own.clone();
    let mut failing = ActiveHealth::new(Duration::ZERO);
    failing.status = Health::Unhealthy;
    failing.last = Some((now, ProbeOutcome::Refused));
    mine[0].1 = failing;
    let mut now = now;
    for _ in 0..5 {
        for (i, b) in fleet.iter_mut().enumerate() {
            let state = if i == holder { &mine } else { &own };
            for request in b.fleet.tick(now, state) {
                b.token += 1;
                b.fleet.sent(request.call.clone(), b.token);
                let (status, body) = etcd.answer(&request, now);
                b.fleet.answered(b.token, status, &body, now);
            }
        }
        now += TICK;
    }
    match fleet[other].fleet.duty(&own[0].0) {
        Duty::Elsewhere {
            health: Some(h),
            holder: Some(_),
        } => assert_eq!(h, failing),
        other => panic!("{other:?}"),
    }
    // A value forged under the key of the backend the other holds, by a writer without that
    // lease, is ignored and logged once.
    let forged_key = format!("upcheck/v1/active/{}", own[1].0);
    let forged = tagged(
        Published::TAG,
        &Published {
            written: now,
            by: 42,
            health: failing,
        },
    );
    etcd.put(&forged_key, &forged, 0);
    let _ = fleet[holder].fleet.take_notes();
    run(&mut etcd, &mut fleet, &own, now, 5);
    let notes = fleet[holder].fleet.take_notes();
    assert_eq!(
        notes
            .iter()
            .filter(|n| n.text.contains(&forged_key))
            .count(),
        1,
        "{notes:?}"
    );
    if let Duty::Elsewhere {
        health: Some(h), ..
    } = fleet[holder].fleet.duty(&own[1].0)
    {
        assert_ne!(h, failing, "the forged state is not taken in");
    }
}

#[test]
fn garbage_foreign_and_hostile_values_are_ignored_with_one_line_each() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers(1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 5);
    let lease = fleet[0].fleet.lease().unwrap();
    let hostile = [
        (
            "upcheck/v1/active/app0@app0",
            b"\xff\xfe not json".to_vec(),
            lease,
        ),
        (
            "upcheck/v1/active/app1@app1",
            br#"{"v":2,"by":"1","health":{}}"#.to_vec(),
            lease,
        ),
        ("upcheck/v1/duty/app9@app9", b"12".to_vec(), lease),
        ("upcheck/v1/whatever", b"x".to_vec(), 0),
        ("upcheck/v0/duty/app0@app0", b"x".to_vec(), 0),
    ];
    for (k, v, l) in &hostile {
        etcd.put(k, v, *l);
    }
    let _ = fleet[0].fleet.take_notes();
    run(&mut etcd, &mut fleet, &own, now, 10);
    let notes = fleet[0].fleet.take_notes();
    for (k, _, _) in &hostile {
        assert_eq!(
            notes.iter().filter(|n| n.text.contains(k)).count(),
            1,
            "{k}: {notes:?}"
        );
    }
    assert_eq!(
        here(&fleet[0], &own),
        vec![true, true],
        "its own duties stand"
    );
}

#[test]
fn the_operators_membership_and_its_followers_reports_are_taken_without_a_line() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers(1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 5);
    let written = [
        (
            "upcheck/v1/membership",
            br#"{"kind":"membership/v1","upstreams":[]}"#.to_vec(),
        ),
        (
            "upcheck/v1/applied/lb1:127.0.0.1:8080",
            br#"{"revision":3,"backends":[]}"#.to_vec(),
        ),
    ];
    for (k, v) in &written {
        etcd.put(k, v, 0);
    }
    let _ = fleet[0].fleet.take_notes();
    run(&mut etcd, &mut fleet, &own, now, 10);
    let notes = fleet[0].fleet.take_notes();
    assert!(
        notes.iter().all(|n| !n.text.contains("upcheck/v1/")),
        "{notes:?}"
    );
    assert_eq!(here(&fleet[0], &own), vec![true, true], "its duties stand");
}

#[test]
fn a_balancer_gone_loses_its_duties_when_its_lease_expires_and_another_takes_them() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers(2, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    assert_eq!(probers(&fleet, &own), vec![1, 1]);
    let gone = fleet.iter().position(|b| here(b, &own)[0]).unwrap();
    fleet[gone].up = false;
    let ttl = settings().lease_ttl;
    let ticks = u32::try_from((ttl.as_millis() / TICK.as_millis()) as u64).unwrap() + 3;
    run(&mut etcd, &mut fleet, &own, now, ticks);
    assert_eq!(
        here(&fleet[1 - gone], &own),
        vec![true, true],
        "within a TTL and a read"
    );
}

/// Two balancers with `settings` in front of 4 backends; etcd goes down for a lease TTL and
/// more, then answers again. Asserts that neither probes alone before the TTL, each does after
/// it, and both rejoin and say so; hands back what each logged while etcd was down.
fn without_etcd_then_back(settings: Settings) -> Vec<Vec<Note>> {
    let ttl_ticks = u32::try_from(settings.lease_ttl.as_millis() / TICK.as_millis()).unwrap();
    let mut etcd = Etcd::default();
    let own = keys(4);
    let mut fleet = balancers_with(settings, 2, S);
    let mut now = run(&mut etcd, &mut fleet, &own, S, 10);
    for b in &mut fleet {
        let _ = b.fleet.take_notes();
    }
    etcd.down = true;
    now = run(&mut etcd, &mut fleet, &own, now, ttl_ticks - 1);
    assert_eq!(
        probers(&fleet, &own),
        vec![1; 4],
        "not yet: a blip is no reason"
    );
    now = run(&mut etcd, &mut fleet, &own, now, 3);
    assert_eq!(probers(&fleet, &own), vec![2; 4], "each on its own");
    now = run(&mut etcd, &mut fleet, &own, now, 20);
    let down: Vec<Vec<Note>> = fleet.iter_mut().map(|b| b.fleet.take_notes()).collect();
    assert!(fleet.iter().all(|b| b.fleet.local()));
    etcd.down = false;
    run(&mut etcd, &mut fleet, &own, now, 20);
    assert_eq!(probers(&fleet, &own), vec![1; 4], "rejoined");
    for b in &mut fleet {
        let notes = b.fleet.take_notes();
        assert!(
            notes.iter().any(|n| n.text.contains("etcd answers again")),
            "{notes:?}"
        );
    }
    down
}

#[test]
fn without_etcd_a_balancer_probes_everything_itself_within_one_ttl_says_so_once_and_rejoins() {
    for notes in without_etcd_then_back(settings()) {
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(
            notes[0].text.contains("every backend is probed here"),
            "{notes:?}"
        );
        assert!(notes[0].text.contains("etcd answered 503"), "{notes:?}");
    }
}

#[test]
fn a_new_balancer_probes_nothing_until_etcd_says_what_is_free() {
    let fleet = FleetPart::new(settings(), S);
    assert!(matches!(
        fleet.duty("app0@app0"),
        Duty::Elsewhere {
            holder: None,
            health: None
        }
    ));
}

#[test]
fn a_steady_balancer_reads_every_third_tick_and_renews_its_lease_every_third_of_its_ttl() {
    let mut etcd = Etcd::default();
    let own = keys(3);
    let mut fleet = balancers(1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    etcd.by_path.clear();
    // 30 ticks (6 s), steady: a read once 500 ms have passed (every third 200 ms tick), a
    // keepalive every 2 s, nothing else (its duties held, its results published).
    run(&mut etcd, &mut fleet, &own, now, 30);
    let counts: Vec<(&str, usize)> = etcd.by_path.iter().map(|(p, n)| (*p, *n)).collect();
    assert_eq!(counts, [("/v3/kv/range", 10), ("/v3/lease/keepalive", 3)]);
}

#[test]
fn a_failed_read_is_tried_again_at_the_next_tick_and_a_second_failure_waits_the_usual_pace() {
    let mut etcd = Etcd::default();
    let own = keys(3);
    let mut fleet = balancers(1, S);
    let mut now = run(&mut etcd, &mut fleet, &own, S, 10);
    let reads = |etcd: &Etcd| etcd.by_path.get("/v3/kv/range").copied().unwrap_or(0);
    let mut read_at = Vec::new();
    for down in [[true; 7], [false; 7]].concat() {
        etcd.down = down;
        let before = reads(&etcd);
        now = run(&mut etcd, &mut fleet, &own, now, 1);
        read_at.push(reads(&etcd) > before);
    }
    // Steady, a read every third 200 ms tick; the first that fails is tried again at the next
    // tick, the second waits 500 ms (three ticks), and so does every one after it until one
    // answers, which resets the pace to steady.
    let first = read_at.iter().position(|r| *r).unwrap();
    assert!(first < 3, "{read_at:?}");
    assert_eq!(
        read_at[first..first + 11],
        [true, true, false, false, true, false, false, true, false, false, true],
        "{read_at:?}"
    );
}

#[test]
fn followed_by_a_watch_each_balancer_reads_the_prefix_once_and_the_duties_spread_as_with_reads() {
    let mut etcd = Etcd::default();
    let own = keys(6);
    let mut fleet = balancers_with(watching(), 3, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 20);
    assert_eq!(probers(&fleet, &own), vec![1; 6]);
    assert!(fleet
        .iter()
        .all(|b| b.fleet.balancers() == 3 && !b.fleet.local()));
    assert_eq!(etcd.asked("/v3/kv/range"), 3, "one read each");
    assert_eq!(etcd.asked("watch"), 3, "one stream each");
    // A minute idle: no read on the clock, nobody falls back to local.
    run(&mut etcd, &mut fleet, &own, now, 300);
    assert_eq!(etcd.asked("/v3/kv/range"), 3);
    assert_eq!(etcd.asked("watch"), 3);
    assert_eq!(probers(&fleet, &own), vec![1; 6]);
    assert!(fleet.iter().all(|b| !b.fleet.local()));
}

/// Balancer `b` publishes its failures `failed` of app0, written at `written` by its clock, and
/// `etcd` takes the put at `now`.
fn publish_failures(
    b: &mut Balancer,
    etcd: &mut Etcd,
    failed: &[Remembered],
    written: Time,
    now: Time,
) {
    let publish = b
        .fleet
        .evidence("app0@app0", failed.iter(), written)
        .expect("a failure to publish");
    b.token += 1;
    b.fleet.sent(publish.call.clone(), b.token);
    let (status, body) = etcd.answer(&publish, now);
    assert!(b.fleet.answered(b.token, status, &body, now));
}

#[test]
fn a_failure_one_balancer_publishes_is_held_by_a_watching_balancer_the_moment_it_is_put() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 2, S);
    fleet.extend(balancers(1, S));
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    let failed = [Remembered {
        at: now,
        about: About::Backend,
    }];
    publish_failures(&mut fleet[0], &mut etcd, &failed, now, now);
    for b in &mut fleet {
        b.hear(&etcd, now);
    }
    assert_eq!(
        fleet[1].fleet.fleet_failures("app0@app0"),
        vec![(fleet[0].fleet.lease().expect("a lease"), failed[0])],
        "the watching balancer holds it at once"
    );
    assert!(
        fleet[2].fleet.fleet_failures("app0@app0").is_empty(),
        "one that reads on the clock holds it only at its next read"
    );
}

#[test]
fn a_failure_timed_by_a_clock_five_seconds_off_is_held_by_a_watching_balancer_at_its_own_time() {
    let off = Duration::from_secs(5);
    for ahead in [true, false] {
        let mut etcd = Etcd::default();
        let own = keys(2);
        let mut fleet = balancers_with(watching(), 2, S);
        let now = run(&mut etcd, &mut fleet, &own, S, 40);
        // The first balancer's clock reads `off` ahead of (or behind) the second's.
        let theirs = match ahead {
            true => now + off,
            false => now - off,
        };
        let failed = [Remembered {
            at: theirs,
            about: About::Backend,
        }];
        publish_failures(&mut fleet[0], &mut etcd, &failed, theirs, now);
        // Heard 15 ms after it was put, then taken in as a read is.
        let heard = now + Duration::from_millis(15);
        fleet[1].hear(&etcd, heard);
        let held = fleet[1].fleet.fleet_failures("app0@app0");
        assert_eq!(
            held.iter().map(|(_, f)| f.at).collect::<Vec<_>>(),
            vec![heard],
            "ahead {ahead}: held at the second's time of its delivery, not the first's clock"
        );
    }
}

#[test]
fn a_stream_that_ends_is_resumed_after_the_last_revision_heard_without_reading_again() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 2, S);
    let mut now = run(&mut etcd, &mut fleet, &own, S, 10);
    let (token, heard) = fleet[0].stream.take().expect("a stream");
    fleet[0].fleet.watch_closed(token, 14);
    let notes = fleet[0].fleet.take_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.text.contains("resuming from revision")),
        "{notes:?}"
    );
    // Meanwhile another balancer changes something: the resumed watch must bring it.
    etcd.put("upcheck/v1/ejected/x", b"not upcheck's", 0);
    now = run(&mut etcd, &mut fleet, &own, now, 1);
    assert_eq!(etcd.asked("/v3/kv/range"), 2, "no read again");
    assert_eq!(etcd.asked("watch"), 3, "reopened once");
    assert!(fleet[0].stream.is_some_and(|(_, r)| r > heard));
    let notes = fleet[0].fleet.take_notes();
    assert!(
        notes
            .iter()
            .any(|n| n.text.contains("upcheck/v1/ejected/x")),
        "the change made while it was closed is heard, and refused: {notes:?}"
    );
    run(&mut etcd, &mut fleet, &own, now, 10);
    assert_eq!(probers(&fleet, &own), vec![1; 2]);
}

#[test]
fn a_watch_etcd_compacted_away_is_followed_by_one_fresh_read() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    let (token, _) = fleet[0].stream.take().expect("a stream");
    let canceled = watch::message(&watch::Heard::Canceled {
        compacted: Some(etcd.revision),
        reason: "mvcc: required revision has been compacted".into(),
    });
    assert!(!fleet[0].fleet.watch_message(token, &canceled, now).keep);
    run(&mut etcd, &mut fleet, &own, now, 5);
    assert_eq!(etcd.asked("/v3/kv/range"), 2, "read again, once");
    assert_eq!(etcd.asked("watch"), 2, "and watched from there");
    assert_eq!(fleet[0].fleet.watch().map(|w| w.resyncs), Some(1));
    assert!(!fleet[0].fleet.local());
}

#[test]
fn garbage_on_the_stream_is_ignored_with_a_line_and_the_prefix_read_again() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    let _ = fleet[0].fleet.take_notes();
    let (token, _) = fleet[0].stream.take().expect("a stream");
    let watched = fleet[0]
        .fleet
        .watch_message(token, b"\xff\xff\xff\xff", now);
    assert!(!watched.keep);
    let notes = fleet[0].fleet.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0]
            .text
            .starts_with("fleet: ignored the watch: a watch message that does not decode"),
        "{notes:?}"
    );
    assert_eq!(here(&fleet[0], &own), vec![true, true], "its duties stand");
    run(&mut etcd, &mut fleet, &own, now, 5);
    assert_eq!(etcd.asked("/v3/kv/range"), 2);
    assert_eq!(etcd.asked("watch"), 2);
}

#[test]
fn a_proxy_that_will_not_open_the_watch_leaves_the_prefix_read_on_the_clock_and_says_so_once() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = FleetPart::new(watching(), S);
    let mut now = S;
    let mut token = 0;
    for _ in 0..50 {
        for request in fleet.tick(now, &own) {
            token += 1;
            fleet.sent(request.call.clone(), token);
            let (status, body) = etcd.answer(&request, now);
            fleet.answered(token, status, &body, now);
        }
        if fleet.watch_due(now).is_some() {
            fleet.watch_refused("bad argument: is the fleet's cluster defined?", now);
        }
        now += TICK;
    }
    let reads = etcd.asked("/v3/kv/range");
    // Due every 500 ms, read at the first tick after: every 600 ms over 10 s.
    assert!((16..=18).contains(&reads), "{reads}");
    let notes: Vec<String> = fleet
        .take_notes()
        .into_iter()
        .map(|n| n.text)
        .filter(|t| t.contains("watch"))
        .collect();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("could not be opened through cluster etcd_grpc"));
    assert!(!fleet.local());
}

#[test]
fn without_etcd_a_watching_balancer_probes_everything_itself_within_one_ttl_and_rejoins() {
    for notes in without_etcd_then_back(watching()) {
        assert!(
            notes
                .iter()
                .any(|n| n.text.contains("every backend is probed here")),
            "{notes:?}"
        );
    }
}

#[test]
fn request_counts_heard_on_the_watch_wait_for_the_tick_and_anything_else_is_taken_in_at_once() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 1, S);
    let now = run(&mut etcd, &mut fleet, &own, S, 10);
    let (token, heard) = fleet[0].stream.expect("a stream");
    let counts = watch::message(&watch::Heard::Changes {
        revision: heard + 1,
        changes: vec![watch::KeyChange::Put(gateway::KeyValue {
            key: "upcheck/v1/traffic/7".into(),
            value: b"counts".to_vec(),
            lease: 7,
        })],
    });
    let watched = fleet[0].fleet.watch_message(token, &counts, now);
    assert_eq!((watched.keep, watched.view_changed), (true, false));
    let failures = watch::message(&watch::Heard::Changes {
        revision: heard + 2,
        changes: vec![watch::KeyChange::Delete(
            "upcheck/v1/failures/7/app0@app0".into(),
        )],
    });
    let watched = fleet[0].fleet.watch_message(token, &failures, now);
    assert_eq!((watched.keep, watched.view_changed), (true, true));
}

#[test]
fn a_watch_the_proxy_opens_after_refusing_it_stops_the_reads_and_a_later_refusal_is_said_again() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = FleetPart::new(watching(), S);
    let mut now = S;
    let mut token = 0;
    let mut step = |fleet: &mut FleetPart, now: Time, token: &mut u32| {
        for request in fleet.tick(now, &own) {
            *token += 1;
            fleet.sent(request.call.clone(), *token);
            let (status, body) = etcd.answer(&request, now);
            fleet.answered(*token, status, &body, now);
        }
    };
    step(&mut fleet, now, &mut token);
    assert!(fleet.watch_due(now).is_some());
    fleet.watch_refused("refused", now);
    now += watch::REOPEN_AFTER;
    step(&mut fleet, now, &mut token);
    assert!(fleet.watch_due(now).is_some(), "tried again");
    token += 1;
    fleet.watch_opened(token, now);
    let created = watch::message(&watch::Heard::Created);
    assert!(fleet.watch_message(token, &created, now).keep);
    let _ = fleet.take_notes();
    // Closed, reopened at once: no read on the clock meanwhile.
    fleet.watch_closed(token, 14);
    now += TICK;
    let calls: Vec<Call> = fleet.tick(now, &own).into_iter().map(|r| r.call).collect();
    assert!(!calls.iter().any(|c| matches!(c, Call::Read)), "{calls:?}");
    assert!(fleet.watch_due(now).is_some());
    fleet.watch_refused("refused", now);
    let refusals = fleet
        .take_notes()
        .into_iter()
        .filter(|n| n.text.contains("could not be opened"))
        .count();
    assert_eq!(refusals, 1, "the refusal after an open is said again");
}

#[test]
fn a_prober_frozen_past_its_lease_publishes_nothing_it_measured_before_the_loss() {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers(2, S);
    let mut now = run(&mut etcd, &mut fleet, &own, S, 10);
    let frozen = fleet.iter().position(|b| here(b, &own)[0]).unwrap();
    let other = 1 - frozen;
    let old_lease = fleet[frozen].fleet.lease().expect("a lease");
    // Frozen (SIGSTOP, a long pause) for a lease TTL and more: the other takes its duties.
    fleet[frozen].up = false;
    let ttl = settings().lease_ttl;
    let ticks = u32::try_from(ttl.as_millis() / TICK.as_millis()).unwrap() + 3;
    now = run(&mut etcd, &mut fleet, &own, now, ticks);
    assert_eq!(here(&fleet[other], &own), vec![true, true]);
    // It wakes up still holding what it measured before the pause: app0 down, long ago.
    let mut stale = own.clone();
    stale[0].1.status = Health::Unhealthy;
    stale[0].1.last = Some((S, ProbeOutcome::Refused));
    fleet[frozen].up = true;
    // A tick of both, the woken one with its own probe states `stale`.
    let tick_both = |etcd: &mut Etcd,
                     fleet: &mut Vec<Balancer>,
                     stale: &[(String, ActiveHealth)],
                     now: Time| {
        let b = &mut fleet[frozen];
        for request in b.fleet.tick(now, stale) {
            b.token += 1;
            b.fleet.sent(request.call.clone(), b.token);
            let (status, body) = etcd.answer(&request, now);
            let _ = b.fleet.answered(b.token, status, &body, now);
        }
        // The other probes on: its states are fresh.
        let fresh: Vec<(String, ActiveHealth)> =
            own.iter().map(|(k, _)| (k.clone(), probed(now))).collect();
        run(etcd, &mut fleet[other..=other], &fresh, now, 1)
    };
    for _ in 0..20 {
        now = tick_both(&mut etcd, &mut fleet, &stale, now);
    }
    assert!(
        etcd.kv.values().all(|(_, lease)| *lease != old_lease),
        "etcd refused every write under the lease it lost"
    );
    let woken = fleet[frozen].fleet.lease().expect("a new lease");
    let others = fleet[other].fleet.lease().expect("a lease");
    let duties = here(&fleet[frozen], &own);
    for ((key, _), mine) in own.iter().zip(&duties) {
        let by = etcd
            .kv
            .get(&format!("upcheck/v1/active/{key}"))
            .map(|(_, lease)| *lease);
        // Nothing the woken one measured before its new lease: the state of the backends it
        // holds again is the last holder's until it probes them anew.
        assert_eq!(
            by,
            Some(others),
            "{key} (held again by the woken one: {mine})"
        );
    }
    // Its next probe of each backend it holds is published.
    for (s, mine) in stale.iter_mut().zip(&duties) {
        if *mine {
            s.1.last = Some((now, ProbeOutcome::Pass));
            s.1.status = Health::Healthy;
        }
    }
    now = tick_both(&mut etcd, &mut fleet, &stale, now);
    let _ = tick_both(&mut etcd, &mut fleet, &stale, now);
    for ((key, _), mine) in own.iter().zip(&duties) {
        let by = etcd
            .kv
            .get(&format!("upcheck/v1/active/{key}"))
            .map(|(_, lease)| *lease);
        assert_eq!(by, Some(if *mine { woken } else { others }), "{key}");
    }
}

#[test]
fn a_watching_balancer_whose_etcd_stops_answering_without_ending_the_stream_falls_back_within_two_ttls(
) {
    let mut etcd = Etcd::default();
    let own = keys(2);
    let mut fleet = balancers_with(watching(), 2, S);
    let mut now = run(&mut etcd, &mut fleet, &own, S, 10);
    assert!(fleet[0].stream.is_some() && !fleet[0].fleet.local());
    // A black hole between it and etcd: its calls go out and nothing comes back; its stream,
    // which nothing ends, hears nothing more.
    let ttl = settings().lease_ttl;
    let cut = now;
    let b = &mut fleet[0];
    while !b.fleet.local() && now.saturating_sub(cut) <= ttl * 3 {
        for request in b.fleet.tick(now, &own) {
            b.token += 1;
            b.fleet.sent(request.call, b.token);
        }
        now += TICK;
    }
    let after = now.saturating_sub(cut);
    assert!(b.fleet.local(), "never fell back");
    assert!(after <= ttl * 2 + TICK, "fell back after {after:?}");
}
