//! What a long-running Envoy must not accumulate: 24 hours of virtual time and ten million
//! requests through the real upcheck.wasm (a main-thread VM and two workers), with one backend at
//! a time breaking every few minutes and a new configuration every hour.
//!
//! Why: the scenarios prove each promise over a minute or two; a filter that leaks a few bytes per
//! request, per probe or per configuration passes all of them and takes Envoy's workers down
//! after a week. Here every VM's linear memory and the shared data must stop growing once warmed
//! up, no guest may trap (a trap fails the test at once), no request may go without a backend
//! while one serves, and requests may fail only on the backend broken when they were sent.
//!
//! The day, deterministic: five upstreams exist (app1..app5); every hour the configuration lists
//! the next of [`BACKEND_SETS`] (adding, removing and reordering backends, never fewer than two)
//! and carries the hour as a probe header, so no configuration comes twice, as with an operator
//! who keeps editing it; every [`FLAP_EVERY`] one configured backend breaks for [`FLAP_FOR`] in
//! the next of [`FAULTS`], so at most one is broken at a time. Traffic is [`RATE`] requests a
//! second, sent a minute at a time; finished requests are tallied and dropped, so the test holds
//! only the requests in flight.
//!
//! The day takes about 2 minutes with wasmtime and the host optimized, 11 in a plain debug
//! build, so it is ignored there and `make soak` runs it in the workspace's `host-test`
//! profile: `cargo test --profile host-test -p upcheck-host-tests --test in_host soak:: -- --ignored
//! --nocapture`. Its short counterpart, a configuration changed every ten seconds, runs
//! everywhere.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};
use upcheck_host_tests::{
    Behaviour, Host, HostError, HostOptions, Load, Outcome, RequestRecord, RequestSpec,
    SharedDataUsage, Traffic, UPCHECK_WASM,
};

/// Virtual time the day covers.
const DAY: Duration = Duration::from_secs(24 * 3600);
/// Requests per second: 116 × 86 400 s is just over ten million.
const RATE: u32 = 116;
/// Traffic is scheduled, run and tallied a minute at a time.
const MINUTE: Duration = Duration::from_secs(60);
/// The configuration changes this often.
const HOUR: Duration = Duration::from_secs(3600);
/// Memory and shared data are expected flat after this much virtual time: one turn through
/// [`BACKEND_SETS`], so that every backend has been configured, added and removed once.
/// Configurations stay new after it, one an hour.
const WARM_UP: Duration = Duration::from_secs(BACKEND_SETS.len() as u64 * 3600);
/// How many bytes the shared data may exceed its warm-up high by. The tables there hold a
/// bounded state per backend (probe state, at most `max_fails` remembered failures, last contact,
/// the configuration announced for it) and a lease per running configuration, whose postcard
/// encodings vary by a few bytes with the values themselves (varint counters and fingerprints,
/// sub-second nanoseconds of timestamps). A leak of one byte per probe round (8 640 per backend
/// after warm-up), per thousand requests (7 million after warm-up) or per configuration (18
/// after warm-up, each with its key) is beyond it.
const SHARED_BYTES_SLACK: usize = 64;
/// A backend breaks this often...
const FLAP_EVERY: Duration = Duration::from_secs(5 * 60);
/// ...starting this long after the minute began (off the probe rounds' and the traffic's beat)...
const FLAP_OFFSET: Duration = Duration::from_secs(17);
/// ...for this long, then recovers.
const FLAP_FOR: Duration = Duration::from_secs(2 * 60);
/// Envoy's route timeout in the host (a request to a hanging backend fails this much later).
const ROUTE_TIMEOUT: Duration = Duration::from_secs(15);

const UPSTREAMS: [&str; 5] = ["app1", "app2", "app3", "app4", "app5"];

/// The configured backends, hour after hour (cycled): adds, removals and reorderings.
const BACKEND_SETS: [&[&str]; 6] = [
    &["app1", "app2", "app3", "app4"],
    &["app1", "app2", "app3", "app4", "app5"],
    &["app5", "app4", "app3", "app2", "app1"],
    &["app5", "app3", "app1"],
    &["app3", "app1"],
    &["app2", "app3", "app1", "app4"],
];

/// How a backend breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    /// Every path answers 502 (the incident's sidecar).
    Answers502,
    /// Accepts connections and never answers.
    Hangs,
    /// Nothing listens.
    Refuses,
    /// `/up` answers 503 while real pages still work.
    ProbeFails,
}

const FAULTS: [Fault; 4] = [
    Fault::Answers502,
    Fault::Hangs,
    Fault::Refuses,
    Fault::ProbeFails,
];

/// One backend broken for a while.
#[derive(Clone, Debug)]
struct Flap {
    backend: &'static str,
    fault: Fault,
    from: Duration,
    until: Duration,
}

impl Flap {
    /// Whether `record` may have failed because of this flap: sent to this backend while it was
    /// broken (a backend's behaviour is decided when a request reaches it, and requests are
    /// routed as they arrive).
    fn may_fail(&self, record: &RequestRecord) -> bool {
        record.upstream.as_deref() == Some(self.backend)
            && record.sent >= self.from
            && record.sent < self.until
    }
}

fn backends(hour: usize) -> &'static [&'static str] {
    BACKEND_SETS[hour % BACKEND_SETS.len()]
}

/// A configuration listing `backends`, with `revision` as a probe header, so that every revision
/// is a new configuration.
fn config_json(backends: &[&str], revision: usize) -> String {
    let upstreams: Vec<String> = backends
        .iter()
        .map(|name| format!(r#"{{"name":"{name}"}}"#))
        .collect();
    format!(
        r#"{{"upstreams":[{}],"health_checks":{{"active":{{"headers":{{"x-revision":"{revision}"}}}}}}}}"#,
        upstreams.join(",")
    )
}

/// Scripts `flap` on its upstream; every upstream is healthy outside its flaps.
fn script(host: &mut Host, flap: &Flap) {
    let healthy = Behaviour::status(200);
    let upstream = host.upstream(flap.backend);
    let broken = match flap.fault {
        Fault::Answers502 => Behaviour::status(502),
        Fault::Hangs => Behaviour::Hang,
        Fault::Refuses => Behaviour::Refuse,
        Fault::ProbeFails => {
            upstream
                .path("/up", healthy.clone())
                .from(flap.from, Behaviour::status(503))
                .from(flap.until, healthy);
            return;
        }
    };
    upstream
        .all_from(flap.from, broken)
        .all_from(flap.until, healthy);
}

/// Where the history of changes is in shared data.
const HISTORY: &str = upcheck_policy::tables::keys::HISTORY;

/// Whether the history of changes holds at most the default `history` (64) changes, as the
/// module's own decoder reads it.
fn history_is_bounded(host: &Host) -> Result<(), String> {
    let (bytes, _cas) = host
        .shared_data(HISTORY)
        .ok_or("no history of changes in shared data")?;
    let history = upcheck_policy::tables::decode_history(&bytes)
        .map_err(|e| format!("the history does not decode: {e}"))?;
    let limit = upcheck_policy::config::DEFAULT_HISTORY as usize;
    if history.len() > limit {
        return Err(format!(
            "{} changes in the history, more than {limit}",
            history.len()
        ));
    }
    Ok(())
}

/// What the VMs and the shared data hold at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Footprint {
    pages: Vec<u64>,
    shared: SharedDataUsage,
}

impl Footprint {
    /// The history of changes is left out of the shared bytes: it is bounded by its count
    /// ([`history_is_bounded`]), and its bytes vary with the reasons of the changes in it.
    fn of(host: &mut Host) -> Footprint {
        let mut shared = host.shared_data_usage();
        if let Some((history, _cas)) = host.shared_data(HISTORY) {
            shared.bytes -= HISTORY.len() + history.len();
        }
        Footprint {
            pages: (0..host.vm_count())
                .map(|vm| host.memory_pages(vm))
                .collect(),
            shared,
        }
    }

    /// The larger of each figure.
    fn max(&self, other: &Footprint) -> Footprint {
        Footprint {
            pages: self
                .pages
                .iter()
                .zip(&other.pages)
                .map(|(a, b)| *a.max(b))
                .collect(),
            shared: SharedDataUsage {
                keys: self.shared.keys.max(other.shared.keys),
                bytes: self.shared.bytes.max(other.shared.bytes),
            },
        }
    }
}

/// What became of the day's requests.
#[derive(Default)]
struct Tally {
    requests: usize,
    outcomes: BTreeMap<String, usize>,
    /// Failures routed to a backend while it was broken, by fault.
    failures_by_fault: BTreeMap<String, usize>,
    /// Requests that were never routed to a backend, or never finished.
    without_backend: Vec<RequestRecord>,
    /// Failures on a backend that was not broken then.
    unexplained: Vec<RequestRecord>,
}

impl Tally {
    fn add(&mut self, traffic: Traffic, flaps: &[Flap]) {
        self.requests += traffic.len();
        for (outcome, count) in traffic.outcomes() {
            *self.outcomes.entry(outcome).or_default() += count;
        }
        for record in traffic.requests {
            if record.upstream.is_none() || record.outcome == Outcome::Pending {
                self.without_backend.push(record);
            } else if record.failed() {
                match flaps.iter().rev().find(|flap| flap.may_fail(&record)) {
                    Some(flap) => {
                        let fault = format!("{:?}", flap.fault);
                        *self.failures_by_fault.entry(fault).or_default() += 1;
                    }
                    None => self.unexplained.push(record),
                }
            }
        }
    }
}

fn ok<T>(result: Result<T, HostError>) -> T {
    result.unwrap_or_else(|e| panic!("{e}"))
}

fn host() -> Host {
    let options = HostOptions {
        route_timeout: ROUTE_TIMEOUT,
        ..HostOptions::default()
    };
    let mut host = Host::from_file(UPCHECK_WASM, options)
        .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    for name in UPSTREAMS {
        host.upstream(name).path("/up", Behaviour::status(200));
    }
    host
}

#[test]
#[ignore = "a day of virtual time: run by `make host-test`, optimized (`--profile host-test`); run with --ignored"]
fn a_day_of_flapping_backends_and_hourly_new_configurations_leaks_nothing_and_strands_no_request() {
    let wall = Instant::now();
    let mut host = host();
    ok(host.start(&config_json(backends(0), 0)));
    let load = Load {
        rate: RATE,
        duration: MINUTE,
        request: RequestSpec::default(),
    };
    let mut flaps: Vec<Flap> = Vec::new();
    let mut tally = Tally::default();
    let mut sent = 0;
    let mut warm: Option<Footprint> = None;
    let mut high = Footprint::of(&mut host);
    let mut configurations = 1;
    for minute in 0..DAY.as_secs() / MINUTE.as_secs() {
        let now = MINUTE * minute as u32;
        let hour = (now.as_secs() / HOUR.as_secs()) as usize;
        if minute > 0 && now.as_secs().is_multiple_of(HOUR.as_secs()) {
            ok(host.reconfigure(&config_json(backends(hour), hour)));
            configurations += 1;
            println!(
                "hour {hour:>2}: {} requests, {:.1} s of wall time",
                tally.requests,
                wall.elapsed().as_secs_f64()
            );
        }
        if now.as_secs().is_multiple_of(FLAP_EVERY.as_secs()) && now >= FLAP_EVERY {
            let index = flaps.len();
            let configured = backends(hour);
            let flap = Flap {
                backend: configured[index % configured.len()],
                fault: FAULTS[index % FAULTS.len()],
                from: now + FLAP_OFFSET,
                until: now + FLAP_OFFSET + FLAP_FOR,
            };
            script(&mut host, &flap);
            flaps.push(flap);
        }
        sent += ok(host.send_load(&load)).len();
        ok(host.advance(MINUTE));
        tally.add(host.take_finished_records(), &flaps);
        let footprint = Footprint::of(&mut host);
        high = high.max(&footprint);
        if now + MINUTE == WARM_UP {
            warm = Some(high.clone());
            high = footprint;
        }
    }
    ok(host.advance(ROUTE_TIMEOUT + MINUTE));
    tally.add(host.take_finished_records(), &flaps);
    let end = Footprint::of(&mut host);
    let high = high.max(&end);
    let warm = warm.unwrap_or_else(|| panic!("the day is longer than the warm-up"));

    println!(
        "{} requests over {:?} of virtual time in {:.1} s of wall time",
        tally.requests,
        host.now(),
        wall.elapsed().as_secs_f64()
    );
    println!(
        "{} flaps, {configurations} configurations, outcomes {:?}",
        flaps.len(),
        tally.outcomes
    );
    println!(
        "failures on a broken backend, by fault: {:?}",
        tally.failures_by_fault
    );
    for (vm, pages) in warm.pages.iter().enumerate() {
        println!(
            "vm{vm} memory: {pages} pages at most during warm-up ({WARM_UP:?}), {} at most after, {} at the end",
            high.pages[vm], end.pages[vm]
        );
    }
    println!(
        "shared data: {:?} at most during warm-up, {:?} at most after, {:?} at the end",
        warm.shared, high.shared, end.shared
    );

    let mut broken = Vec::new();
    if tally.requests != sent {
        broken.push(format!("{sent} requests sent, {} finished", tally.requests));
    }
    if sent < 10_000_000 {
        broken.push(format!("{sent} requests is short of ten million"));
    }
    if let Some(first) = tally.without_backend.first() {
        broken.push(format!(
            "{} requests went without a backend, the first: {first:?}",
            tally.without_backend.len()
        ));
    }
    if let Some(first) = tally.unexplained.first() {
        broken.push(format!(
            "{} requests failed on a backend that was not broken, the first: {first:?}",
            tally.unexplained.len()
        ));
    }
    if high.pages != warm.pages {
        broken.push(format!(
            "linear memory grew after warm-up: {:?} pages, then {:?}",
            warm.pages, high.pages
        ));
    }
    if high.shared.keys != warm.shared.keys
        || high.shared.bytes > warm.shared.bytes + SHARED_BYTES_SLACK
    {
        broken.push(format!(
            "shared data grew after warm-up: {:?}, then {:?}",
            warm.shared, high.shared
        ));
    }
    if let Err(unbounded) = history_is_bounded(&host) {
        broken.push(unbounded);
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn a_configuration_changed_every_ten_seconds_leaves_no_shared_data_behind() {
    let mut host = host();
    ok(host.start(&config_json(&UPSTREAMS, 0)));
    ok(host.traffic(10, Duration::from_secs(10)));
    let settled = host.shared_data_usage();
    let mut high = settled;
    for change in 1..=60 {
        ok(host.reconfigure(&config_json(&UPSTREAMS, change)));
        ok(host.traffic(10, Duration::from_secs(10)));
        let usage = host.shared_data_usage();
        high.keys = high.keys.max(usage.keys);
        high.bytes = high.bytes.max(usage.bytes);
    }
    println!(
        "shared data: {settled:?} after the first configuration, at most {high:?} after 60 more"
    );
    assert_eq!(
        high.keys, settled.keys,
        "60 configurations later: {settled:?}, then at most {high:?}"
    );
    assert!(
        high.bytes <= settled.bytes + SHARED_BYTES_SLACK,
        "60 configurations later: {settled:?}, then at most {high:?}"
    );
}
