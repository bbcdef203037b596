//! Random histories driven through the real upcheck.wasm, and the policy's promises checked from
//! outside: only from what the host saw (probes sent and answered, requests routed, status pages,
//! log lines), never from what the module says about its own decisions.
//!
//! Why: the scenario tests cover the incidents someone thought of; the promises are about any
//! interleaving of probes, traffic, reconfigurations and worker VMs going away. Each history has
//! 1 to 4 workers, a probe interval of 2, 5 or 10 s (timeout half of it), six scripted upstreams
//! `b0`..`b5` of which 1 to 6 are configured, all answering 200 at first, and a sequence of
//! steps: a backend's probes start passing, passing slowly, answering 502 or 503, refusing the
//! connection or hanging past the timeout; its user requests start answering 200, 502, 500,
//! slowly, refusing or hanging; a burst of user requests at some rate; a time jump (a millisecond
//! to minutes); a reconfiguration that adds, removes and reorders backends and changes
//! `max_ejection_percent`; a VM stopped (its thread hung) or restarted (`FAIL_RELOAD`). Envoy's
//! route timeout is 5 s here. proptest shrinks a failing history to a short one and prints it
//! with the violation.
//!
//! # The properties
//!
//! A probe *settles* when its answer (or Envoy's 503 for a refused connection, 504 for a timeout)
//! is handed to the VM that sent it, and that VM has probed for the process (its last "now probes
//! for the process" log line, and nobody's since) from before it sent the probe until the answer
//! came. The answers of a VM that stopped, or that lost the lease (to another VM, or by a
//! reconfiguration, after which a lease is won afresh), do not count: the new prober probes
//! every backend at once. A backend's *last probe* at time t is, of those settled by t, the one sent last (an
//! older probe that settles later, from a VM that has since lost the lease to a newer
//! configuration's prober, says less), and it belongs to the backend's current membership only
//! if it was sent after the backend was last added to the configuration. `LAG` is one tick (200 ms, how often workers take in what the prober
//! published) plus 50 ms.
//!
//! - **(a)** No VM traps: every host call succeeds (the host runs with [`OnTrap::Fail`]).
//! - **(b)** A request routed at t to backend B breaks the policy if B's last probe failed (an
//!   answer other than the backend's own 2xx) and settled by t − `LAG`, while another configured
//!   backend A's last probe passed and settled by t − `LAG`, and A is *accepting*: no request
//!   routed to A found it refusing connections at or after that probe settled. A timeout while
//!   B answered a request (under 500) in the meantime is neither: it counts neither way (probes
//!   wait in the same queue as pages). No other exemption is needed, and none is made: A being
//!   passively ejected
//!   does not matter (B is not healthy, and the pool guard widens the set only when no backend
//!   is healthy and accepting), and a cold start is over once a probe has settled. The guard's
//!   own cases are exactly those left: every backend failing its probes, or the healthy ones
//!   refusing connections.
//! - **(c)** Every user request is routed to a configured backend (never Envoy's 503 for a
//!   missing route header), at most one probe timeout plus `LAG` after it was sent, or after the
//!   cold start it waited through began (a reconfiguration keeping no backend, or the restart of
//!   its worker VM). The design promises this even when no backend accepts connections (then
//!   all are tried), so it is checked always. Exempt: requests held by a VM that stopped before
//!   routing them (a hung thread answers nobody).
//! - **(d)** The status page (`/upcheck/status.json` on its own listener, read at least once a virtual
//!   second, from whichever worker's turn it is) lists the configured backends in order, at least
//!   one of them routable, none both routable and ejected, and at most
//!   min(⌊`max_ejection_percent` × n / 100⌋, n − 1) ejected, n being the backends the cap applies
//!   to (routable or ejected).
//! - **(e)** Each backend gets one probe per interval whatever the number of workers: over every
//!   stretch of time in which it stays configured and the same VM probes, at most
//!   ⌈length / interval⌉ + 1 probes (jitter moves a probe by at most a tenth of the interval).
//!   Exempt, because the design probes at once there: the first round of a VM that takes over
//!   probing (a stretch ends at each "now probes for the process" log line), and probes sent
//!   while the backend may be passively ejected (`max_fails` of its requests failed within
//!   `fail_duration` + `LAG`) or within two `LAG`s of a logged ejection (an outlier ejection
//!   shows only there; an ejection the cap held back is logged when it takes effect), since a
//!   backend is probed at once when it is ejected.
//!
//! # Defects found, kept as replays
//!
//! 1. A request's outcome was charged to whichever backend held the request's position in the
//!    configuration when the answer came, so after a reconfiguration that moved backends a
//!    request in flight could get a backend it was never sent to ejected
//!    (`a_removed_backends_timeouts_are_not_charged_to_the_backend_that_took_its_place`).
//! 2. A probe that passed just after a request found its backend refusing, before the prober
//!    read that refusal, reached some workers two ticks late
//!    (`a_backend_whose_probe_passes_just_after_a_refusal_is_back_on_every_worker_within_one_tick`).
//! 3. A worker that lost the lease kept the probe state it had passed over while it probed, and
//!    routed to a backend another VM had found failing
//!    (`a_worker_that_loses_the_lease_takes_in_what_it_passed_over_while_it_probed`).
//!
//! Others are kept as tests of the policy core, where they are short (filter/policy/tests/
//! incidents.rs): a slow probe answer overtaken by a newer probe's failure made a backend
//! healthy again; a backend was probed "at once" each time the ejection cap let it back and took
//! it out anew, and again as it was re-added with failures on record just after a probe passed.
//!
//! Each of the two tests drives at least `EVENTS_PER_TEST` steps (across histories) and prints
//! what it drove and how long it took. With `UPCHECK_HISTORY_TRACE=<file>` set, a failing
//! history's steps, log lines and probes, with their times, are written to that file (the
//! shortest one found, once shrinking ends).

use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, RngSeed, TestCaseError, TestRunner};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};
use upcheck_host_tests::envoy::UF;
use upcheck_host_tests::{
    Behaviour, CallRecord, Host, HostError, HostOptions, OnTrap, RequestRecord, RequestSpec,
    VmStatus, UPCHECK_WASM,
};

/// The upstreams every history scripts; a configuration names some of them.
const NAMES: [&str; 6] = ["b0", "b1", "b2", "b3", "b4", "b5"];
/// One tick (200 ms, how often every VM takes in what the others published) plus a margin: by then every worker routes by what a settled probe said.
const LAG: Duration = Duration::from_millis(250);
/// Envoy's route timeout (15 s by default): a hung request fails after this long.
const ROUTE_TIMEOUT: Duration = Duration::from_secs(5);
/// Where the status page listens, as the shipped configurations put it.
const PAGE_LISTENER: &str = "127.0.0.1:9902";
/// The status page, as JSON.
const STATUS_PAGE: &str = "/upcheck/status.json";
/// The status page is read whenever this much virtual time passed since the last reading.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// `health_checks.passive.fail_duration`, the default the histories keep.
const FAIL_DURATION: Duration = Duration::from_secs(10);
/// `health_checks.passive.max_fails`, the default the histories keep.
const MAX_FAILS: usize = 3;
/// Steps each test drives at least, over as many histories as that takes.
const EVENTS_PER_TEST: u64 = 50_000;
/// The environment variable naming a file to write a failing history's trace to ([`trace`]).
const TRACE: &str = "UPCHECK_HISTORY_TRACE";
/// Where the histories are drawn from, unless `PROPTEST_RNG_SEED` says otherwise.
const SEED: u64 = 0x7570_6368_6563_6b21;
/// Longest history, in steps.
const MAX_STEPS: usize = 600;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How a backend's `/up` answers.
#[derive(Clone, Copy, Debug)]
enum Probe {
    Pass,
    SlowPass(Duration),
    Soft(u16),
    Refuse,
    Hang,
}

impl Probe {
    fn behaviour(self) -> Behaviour {
        match self {
            Probe::Pass => Behaviour::status(200),
            Probe::SlowPass(after) => Behaviour::status(200).after(after),
            Probe::Soft(status) => Behaviour::status(status),
            Probe::Refuse => Behaviour::Refuse,
            Probe::Hang => Behaviour::Hang,
        }
    }
}

/// How a backend answers user requests.
#[derive(Clone, Copy, Debug)]
enum Answer {
    Ok,
    Slow(Duration),
    Status(u16),
    Refuse,
    Hang,
}

impl Answer {
    fn behaviour(self) -> Behaviour {
        match self {
            Answer::Ok => Behaviour::status(200),
            Answer::Slow(after) => Behaviour::status(200).after(after),
            Answer::Status(status) => Behaviour::status(status),
            Answer::Refuse => Behaviour::Refuse,
            Answer::Hang => Behaviour::Hang,
        }
    }
}

/// One step of a history.
#[derive(Clone, Debug)]
enum Step {
    /// From now on the backend's `/up` answers so.
    Probes(&'static str, Probe),
    /// From now on the backend answers user requests so.
    Requests(&'static str, Answer),
    /// `count` user requests, one every `every`, the first `every` from now; the clock moves on
    /// past the last one.
    Burst { count: u32, every: Duration },
    /// The clock moves on.
    Wait(Duration),
    /// A new plugin configuration.
    Reconfigure {
        upstreams: Vec<&'static str>,
        max_ejection_percent: u8,
    },
    /// VM `n` stops (nothing if it is the last running worker, or stopped).
    Stop(usize),
    /// VM `n`, if stopped, is replaced by a fresh one.
    Restart(usize),
}

/// A whole history.
#[derive(Clone, Debug)]
struct History {
    workers: usize,
    interval: Duration,
    upstreams: Vec<&'static str>,
    max_ejection_percent: u8,
    steps: Vec<Step>,
}

impl History {
    fn timeout(&self) -> Duration {
        self.interval / 2
    }
}

fn name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&NAMES[..])
}

fn upstreams() -> impl Strategy<Value = Vec<&'static str>> {
    prop::sample::subsequence(NAMES.to_vec(), 1..=NAMES.len()).prop_shuffle()
}

fn percent() -> impl Strategy<Value = u8> {
    prop::sample::select(vec![0u8, 25, 50, 100])
}

fn probe() -> impl Strategy<Value = Probe> {
    prop_oneof![
        4 => Just(Probe::Pass),
        1 => (300u64..3_000).prop_map(|n| Probe::SlowPass(ms(n))),
        2 => prop::sample::select(vec![502u16, 503]).prop_map(Probe::Soft),
        1 => Just(Probe::Refuse),
        1 => Just(Probe::Hang),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    prop_oneof![
        4 => Just(Answer::Ok),
        1 => (300u64..8_000).prop_map(|n| Answer::Slow(ms(n))),
        2 => prop::sample::select(vec![502u16, 500]).prop_map(Answer::Status),
        1 => Just(Answer::Refuse),
        1 => Just(Answer::Hang),
    ]
}

fn wait() -> impl Strategy<Value = Duration> {
    prop_oneof![
        55 => (1u64..300).prop_map(ms),
        25 => (300u64..3_000).prop_map(ms),
        3 => (3_000u64..30_000).prop_map(ms),
        1 => (30_000u64..180_000).prop_map(ms),
    ]
}

fn step(workers: usize) -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (name(), probe()).prop_map(|(n, p)| Step::Probes(n, p)),
        3 => (name(), answer()).prop_map(|(n, a)| Step::Requests(n, a)),
        6 => (1u32..=20, prop::sample::select(vec![5u64, 20, 50, 200]))
            .prop_map(|(count, every)| Step::Burst { count, every: ms(every) }),
        6 => wait().prop_map(Step::Wait),
        1 => (upstreams(), percent()).prop_map(|(upstreams, max_ejection_percent)| {
            Step::Reconfigure { upstreams, max_ejection_percent }
        }),
        1 => (0..=workers).prop_map(Step::Stop),
        1 => (0..=workers).prop_map(Step::Restart),
    ]
}

fn history(workers: RangeInclusive<usize>) -> impl Strategy<Value = History> {
    workers.prop_flat_map(|workers| {
        (
            prop::sample::select(vec![2u64, 5, 10]),
            upstreams(),
            percent(),
            prop::collection::vec(step(workers), 1..=MAX_STEPS),
        )
            .prop_map(
                move |(interval, upstreams, max_ejection_percent, steps)| History {
                    workers,
                    interval: Duration::from_secs(interval),
                    upstreams,
                    max_ejection_percent,
                    steps,
                },
            )
    })
}

/// The plugin configuration for `upstreams`.
fn plugin_config(upstreams: &[&str], max_ejection_percent: u8, interval: Duration) -> String {
    let upstreams: Vec<String> = upstreams
        .iter()
        .map(|name| format!(r#"{{"name":"{name}"}}"#))
        .collect();
    format!(
        r#"{{"upstreams":[{}],"max_ejection_percent":{max_ejection_percent},"health_checks":{{"active":{{"interval":"{}ms","timeout":"{}ms"}}}}}}"#,
        upstreams.join(","),
        interval.as_millis(),
        (interval / 2).as_millis()
    )
}

/// The status page's configuration for the pool configured by `config`: the same, with its role.
fn status_page(config: &str) -> String {
    format!(
        r#"{{"role":"status_page",{}"#,
        config.trim_start_matches('{')
    )
}

/// What a history drove.
#[derive(Debug, Default, Clone, Copy)]
struct Driven {
    histories: u64,
    events: u64,
    requests: u64,
    /// Requests routed while a configured backend was failing and another one good.
    contested: u64,
    probes: u64,
    samples: u64,
    virtual_time: Duration,
}

impl Driven {
    fn add(&mut self, other: Driven) {
        self.histories += other.histories;
        self.events += other.events;
        self.requests += other.requests;
        self.contested += other.contested;
        self.probes += other.probes;
        self.samples += other.samples;
        self.virtual_time += other.virtual_time;
    }
}

/// A configuration in force from `from` on (events at that very instant came before it).
struct Configured {
    from: Duration,
    upstreams: Vec<&'static str>,
    max_ejection_percent: u8,
}

/// One history being driven, and what the checks need to know about it besides the host's own
/// records.
struct Run<'h> {
    history: &'h History,
    host: Host,
    configs: Vec<Configured>,
    /// When each VM stopped, in order.
    stops: Vec<(Duration, usize)>,
    /// Cold starts: when a worker's view began from nothing (`None`: every worker's).
    cold_starts: Vec<(Duration, Option<usize>)>,
    last_sample: Option<Duration>,
    driven: Driven,
    /// Each step and when it began, for [`trace`].
    trace: Vec<(Duration, String)>,
}

fn host_error(e: HostError) -> String {
    format!("(a) {e}")
}

impl<'h> Run<'h> {
    fn start(history: &'h History) -> Result<Run<'h>, String> {
        let options = HostOptions {
            workers: history.workers,
            route_timeout: ROUTE_TIMEOUT,
            on_trap: OnTrap::Fail,
            ..HostOptions::default()
        };
        let mut host = Host::from_file(UPCHECK_WASM, options)
            .map_err(|e| format!("{UPCHECK_WASM} loads (run `make build`): {e}"))?;
        for name in NAMES {
            host.upstream(name)
                .path("/up", Behaviour::status(200))
                .others(Behaviour::status(200));
        }
        let config = plugin_config(
            &history.upstreams,
            history.max_ejection_percent,
            history.interval,
        );
        host.listen(PAGE_LISTENER, &status_page(&config))
            .map_err(host_error)?;
        host.start(&config).map_err(host_error)?;
        Ok(Run {
            history,
            host,
            configs: vec![Configured {
                from: Duration::ZERO,
                upstreams: history.upstreams.clone(),
                max_ejection_percent: history.max_ejection_percent,
            }],
            stops: Vec::new(),
            cold_starts: vec![(Duration::ZERO, None)],
            last_sample: None,
            trace: Vec::new(),
            driven: Driven {
                histories: 1,
                ..Driven::default()
            },
        })
    }

    fn config(&self) -> &Configured {
        &self.configs[self.configs.len() - 1]
    }

    fn running(&self, vm: usize) -> bool {
        self.host.vm_status(vm) == VmStatus::Running
    }

    /// Carries out one step; false if it changed nothing (a stop or restart that does not apply).
    fn step(&mut self, step: &Step) -> Result<bool, String> {
        let now = self.host.now();
        match step {
            Step::Probes(name, probe) => {
                self.host.upstream(name).path("/up", probe.behaviour());
            }
            Step::Requests(name, answer) => {
                self.host.upstream(name).others(answer.behaviour());
            }
            Step::Burst { count, every } => {
                for k in 1..=*count {
                    self.host.send(*every * k, RequestSpec::default());
                }
                self.driven.requests += u64::from(*count);
                self.host.advance(*every * *count).map_err(host_error)?;
            }
            Step::Wait(by) => self.host.advance(*by).map_err(host_error)?,
            Step::Reconfigure {
                upstreams,
                max_ejection_percent,
            } => {
                let now = self.host.now();
                let config = plugin_config(upstreams, *max_ejection_percent, self.history.interval);
                self.host.reconfigure(&config).map_err(host_error)?;
                self.host
                    .reconfigure_listener(PAGE_LISTENER, &status_page(&config))
                    .map_err(host_error)?;
                if !upstreams
                    .iter()
                    .any(|name| self.config().upstreams.contains(name))
                {
                    self.cold_starts.push((now, None));
                }
                self.configs.push(Configured {
                    from: now,
                    upstreams: upstreams.clone(),
                    max_ejection_percent: *max_ejection_percent,
                });
            }
            Step::Stop(vm) => {
                let workers_running = (1..=self.history.workers)
                    .filter(|w| self.running(*w))
                    .count();
                if !self.running(*vm) || (*vm > 0 && workers_running == 1) {
                    return Ok(false);
                }
                self.host.stop_vm(*vm);
                self.stops.push((now, *vm));
            }
            Step::Restart(vm) => {
                if self.running(*vm) {
                    return Ok(false);
                }
                self.host.restart_vm(*vm).map_err(host_error)?;
                self.cold_starts.push((now, Some(*vm)));
            }
        }
        Ok(true)
    }

    /// Reads the status page if a virtual second passed since the last reading; checks (d).
    fn sample(&mut self) -> Result<(), String> {
        let now = self.host.now();
        if self
            .last_sample
            .is_some_and(|last| now.saturating_sub(last) < SAMPLE_EVERY)
        {
            return Ok(());
        }
        self.last_sample = Some(now);
        self.driven.samples += 1;
        let page = self
            .host
            .request(RequestSpec {
                path: STATUS_PAGE.to_string(),
                source_address: "127.0.0.1:40000".to_string(),
                destination_address: PAGE_LISTENER.to_string(),
                ..RequestSpec::default()
            })
            .map_err(host_error)?;
        let body = String::from_utf8_lossy(&page.body);
        let fail = |what: String| {
            format!(
                "(d) at {now:?} the status page (vm{}) {what}: {body}",
                page.worker
            )
        };
        if page.status() != Some(200) {
            return Err(fail(format!("answered {:?}", page.outcome)));
        }
        let json: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| fail(format!("is not JSON ({e})")))?;
        let Some(backends) = json["backends"].as_array() else {
            return Err(fail("has no backends list".to_string()));
        };
        let names: Vec<&str> = backends.iter().filter_map(|b| b["name"].as_str()).collect();
        let config = self.config();
        if names != config.upstreams {
            return Err(fail(format!("does not list {:?}", config.upstreams)));
        }
        let flag = |b: &serde_json::Value, key: &str| b[key].as_bool() == Some(true);
        let routable = backends.iter().filter(|b| flag(b, "routable")).count();
        let ejected = backends.iter().filter(|b| flag(b, "ejected")).count();
        if routable == 0 {
            return Err(fail("has every backend out of rotation".to_string()));
        }
        if backends
            .iter()
            .any(|b| flag(b, "routable") && flag(b, "ejected"))
        {
            return Err(fail("has a backend both routable and ejected".to_string()));
        }
        let n = routable + ejected;
        let cap = (usize::from(config.max_ejection_percent) * n / 100).min(n - 1);
        if ejected > cap {
            return Err(fail(format!(
                "has {ejected} of {n} ejected, over max_ejection_percent {}",
                config.max_ejection_percent
            )));
        }
        Ok(())
    }
}

/// Runs a history and checks every property; the error names the first violation.
fn drive(history: &History) -> Result<Driven, String> {
    let mut run = Run::start(history)?;
    let result = drive_run(history, &mut run);
    if let (Err(e), Ok(path)) = (&result, std::env::var(TRACE)) {
        trace(&run, e, &path);
    }
    result
}

/// Writes what the host saw in a failing history to `path`: the violation, then each step, log
/// line and probe with its time. While proptest shrinks, the last history written is the
/// shortest failing one.
fn trace(run: &Run, violation: &str, path: &str) {
    let mut out = format!("{violation}\n");
    for (at, step) in &run.trace {
        out += &format!("STEP {at:?} {step}\n");
    }
    for line in run.host.logs() {
        out += &format!("LOG {:?} vm{} {}\n", line.at, line.vm, line.message);
    }
    for call in run.host.calls() {
        out += &format!(
            "CALL {:?} vm{} {} {:?} {:?}\n",
            call.sent, call.vm, call.cluster, call.status, call.delivered
        );
    }
    if let Err(e) = std::fs::write(path, out) {
        eprintln!("{TRACE}={path}: {e}");
    }
}

fn drive_run(history: &History, run: &mut Run) -> Result<Driven, String> {
    for (i, step) in history.steps.iter().enumerate() {
        let at = run.host.now();
        let fail = |e: String| format!("step {i} ({step:?}) at {at:?}: {e}");
        run.trace.push((at, format!("{step:?}")));
        if run.step(step).map_err(fail)? {
            run.driven.events += 1;
        }
        run.sample().map_err(fail)?;
    }
    // Long enough for every request to be routed (a cold start waits one probe timeout).
    let settle = history.timeout() + Duration::from_secs(1);
    run.host.advance(settle).map_err(host_error)?;
    let checks = Checks::new(run);
    let contested = checks.routing()?;
    checks.probing()?;
    run.driven.contested = contested;
    run.driven.probes = run.host.calls().len() as u64;
    run.driven.virtual_time = run.host.now();
    Ok(run.driven)
}

/// A probe that settled.
#[derive(Debug, Clone)]
struct Settled {
    sent: Duration,
    at: Duration,
    passed: bool,
    /// Whether Envoy gave up waiting for the answer (its 504).
    timed_out: bool,
    /// What answered, for messages.
    answer: String,
}

impl Settled {
    fn new(call: &CallRecord, at: Duration) -> Settled {
        let status = call.status.unwrap_or_default();
        let by_backend = call.details == "via_upstream";
        let answer = match (by_backend, status) {
            (true, status) => format!("the backend's {status}"),
            (false, 504) => "Envoy's 504 (timed out)".to_string(),
            (false, status) => format!("Envoy's {status} ({})", call.details),
        };
        Settled {
            sent: call.sent,
            at,
            passed: by_backend && (200..300).contains(&status),
            timed_out: !by_backend && status == 504,
            answer,
        }
    }
}

/// Where the backends stand at an instant, for (b).
struct Standing<'c> {
    /// The configured backends whose last probe failed.
    failing: Vec<(&'static str, &'c Settled)>,
    /// A configured backend whose last probe passed and that no request found refusing since.
    good: Option<(&'static str, &'c Settled)>,
}

/// Everything the end-of-history checks look up, indexed.
struct Checks<'r> {
    run: &'r Run<'r>,
    end: Duration,
    /// Settled probes per backend, by settling time.
    settled: BTreeMap<String, Vec<Settled>>,
    /// Probes sent per backend, by time.
    sent: BTreeMap<String, Vec<Duration>>,
    /// When a request routed to the backend found it refusing connections.
    refusals: BTreeMap<String, Vec<Duration>>,
    /// When a request routed to the backend failed in a way that counts (502, 503, 504).
    failures: BTreeMap<String, Vec<Duration>>,
    /// When the backend answered a request routed to it with a status under 500.
    served: BTreeMap<String, Vec<Duration>>,
    /// When a VM took over probing.
    takeovers: Vec<Duration>,
    /// When the module logged an ejection of the backend (passive or as an outlier), by time.
    ejections: BTreeMap<String, Vec<Duration>>,
}

/// How many of sorted `times` fall in [from, to].
fn count_within(times: &[Duration], from: Duration, to: Duration) -> usize {
    times.partition_point(|t| *t <= to) - times.partition_point(|t| *t < from)
}

impl<'r> Checks<'r> {
    fn new(run: &'r Run<'r>) -> Checks<'r> {
        let probers: Vec<(Duration, usize)> = run
            .host
            .logs()
            .iter()
            .filter(|line| line.message.contains("now probes for the process"))
            .map(|line| (line.at, line.vm))
            .collect();
        // The VM probing at `t`, and since when.
        let prober_at = |t: Duration| {
            let n = probers.partition_point(|(at, _)| *at <= t);
            n.checked_sub(1).map(|i| (probers[i].1, probers[i].0))
        };
        let mut settled: BTreeMap<String, Vec<Settled>> = BTreeMap::new();
        let mut sent: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for call in run.host.calls() {
            sent.entry(call.cluster.clone())
                .or_default()
                .push(call.sent);
            let delivered = call.delivered.filter(|at| {
                prober_at(*at).is_some_and(|(vm, since)| vm == call.vm && since <= call.sent)
            });
            if let Some(at) = delivered {
                let probe = Settled::new(&call, at);
                settled.entry(call.cluster).or_default().push(probe);
            }
        }
        for probes in settled.values_mut() {
            probes.sort_by_key(|p| p.at);
        }
        let mut refusals: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        let mut failures: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        let mut served: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for r in run.host.records() {
            let (Some(upstream), Some(completed)) = (&r.upstream, r.completed) else {
                continue;
            };
            if r.flags & UF != 0 {
                refusals
                    .entry(upstream.clone())
                    .or_default()
                    .push(completed);
            }
            if r.status().is_some_and(|s| (502..=504).contains(&s)) {
                failures
                    .entry(upstream.clone())
                    .or_default()
                    .push(completed);
            }
            if r.details == "via_upstream" && r.status().is_some_and(|s| s < 500) {
                served.entry(upstream.clone()).or_default().push(completed);
            }
        }
        for times in refusals
            .values_mut()
            .chain(failures.values_mut())
            .chain(served.values_mut())
        {
            times.sort();
        }
        let takeovers = probers.iter().map(|(at, _)| *at).collect();
        let mut ejections: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for line in run.host.logs() {
            let ejected = line
                .message
                .strip_prefix("upcheck: ")
                .and_then(|m| m.split_once(" ejected for "));
            if let Some((name, _)) = ejected {
                ejections.entry(name.to_owned()).or_default().push(line.at);
            }
        }
        Checks {
            run,
            end: run.host.now(),
            settled,
            sent,
            refusals,
            failures,
            served,
            takeovers,
            ejections,
        }
    }

    /// The configuration in force at `t` (a change at `t` itself comes after what happened at `t`).
    fn config_at(&self, t: Duration) -> &Configured {
        let n = self.run.configs.partition_point(|c| c.from < t).max(1);
        &self.run.configs[n - 1]
    }

    /// When `name` was last added to the configuration in force at `t`, if it is in it.
    fn member_since(&self, name: &str, t: Duration) -> Option<Duration> {
        let configs = &self.run.configs;
        let n = configs.partition_point(|c| c.from < t).max(1);
        let mut since = None;
        for config in configs[..n].iter().rev() {
            if !config.upstreams.contains(&name) {
                break;
            }
            since = Some(config.from);
        }
        since
    }

    /// The last probe of `name` settled by `t`, if it was sent in its current membership.
    fn last_probe(&self, name: &str, t: Duration) -> Option<&Settled> {
        let since = self.member_since(name, t)?;
        let settled = self.settled.get(name)?;
        let n = settled.partition_point(|p| p.at <= t);
        // The latest news is the probe sent last: an older one that settles later (sent by a
        // VM that has since lost the lease to a newer configuration's prober) says less.
        let probe = settled.get(..n)?.iter().max_by_key(|p| p.sent)?;
        (probe.sent >= since).then_some(probe)
    }

    /// Whether a request to `name` found it refusing connections in [from, to].
    fn refused_within(&self, name: &str, from: Duration, to: Duration) -> bool {
        self.refusals
            .get(name)
            .is_some_and(|times| count_within(times, from, to) > 0)
    }

    /// Whether `name` may be passively ejected at `t`.
    fn maybe_ejected(&self, name: &str, t: Duration) -> bool {
        let failed = self.failures.get(name).is_some_and(|times| {
            count_within(times, t.saturating_sub(FAIL_DURATION + LAG), t) >= MAX_FAILS
        });
        // An outlier ejection (by failures, latency or stalls) shows only in the log.
        let logged = self
            .ejections
            .get(name)
            .is_some_and(|times| count_within(times, t.saturating_sub(LAG + LAG), t) > 0);
        failed || logged
    }

    /// Whether VM `vm` stopped within [from, to].
    fn stopped_within(&self, vm: usize, from: Duration, to: Duration) -> bool {
        self.run
            .stops
            .iter()
            .any(|(at, stopped)| *stopped == vm && (from..=to).contains(at))
    }

    /// When the cold start request `r`, routed at `routed`, may have waited through began.
    fn waited_from(&self, r: &RequestRecord, routed: Duration) -> Duration {
        self.run
            .cold_starts
            .iter()
            .filter(|(at, vm)| *at <= routed && vm.is_none_or(|vm| vm == r.worker))
            .map(|(at, _)| *at)
            .fold(r.sent, Duration::max)
    }

    /// (b) and (c), over every user request; returns how many requests were routed while (b)
    /// had a say (a configured backend failing and another one good).
    fn routing(&self) -> Result<u64, String> {
        let timeout = self.run.history.timeout();
        let mut contested = 0;
        for (i, r) in self.run.host.records().iter().enumerate() {
            if r.request.path == STATUS_PAGE {
                continue;
            }
            let (Some(upstream), Some(routed)) = (r.upstream.as_deref(), r.routed) else {
                if self.stopped_within(r.worker, r.sent, self.end) {
                    continue;
                }
                return Err(format!(
                    "(c) request {i}, sent at {:?} to vm{}, was never routed: {:?}, {}",
                    r.sent, r.worker, r.outcome, r.details
                ));
            };
            let config = self.config_at(routed);
            if !config.upstreams.contains(&upstream) {
                return Err(format!(
                    "(c) request {i} was routed at {routed:?} to {upstream}, which is not configured ({:?})",
                    config.upstreams
                ));
            }
            let waited_from = self.waited_from(r, routed);
            if routed.saturating_sub(waited_from) > timeout + LAG {
                return Err(format!(
                    "(c) request {i}, sent at {:?} to vm{}, was routed only at {routed:?} (waiting from {waited_from:?})",
                    r.sent, r.worker
                ));
            }
            let standing = self.standing(routed);
            let Some((a, passed)) = standing.good.filter(|_| !standing.failing.is_empty()) else {
                continue;
            };
            contested += 1;
            if let Some((b, failed)) = standing.failing.iter().find(|(b, _)| *b == upstream) {
                return Err(format!(
                    "(b) request {i} (vm{}, sent at {:?}) was routed at {routed:?} to {b}, whose \
                     last probe (sent at {:?}) settled at {:?} with {}, while {a}'s last probe \
                     (sent at {:?}) passed at {:?} and no request found {a} refusing since; \
                     configured: {:?}",
                    r.worker,
                    r.sent,
                    failed.sent,
                    failed.at,
                    failed.answer,
                    passed.sent,
                    passed.at,
                    config.upstreams
                ));
            }
        }
        Ok(contested)
    }

    /// Where the configured backends stand at `t`, by their last probes settled by t − `LAG`.
    fn standing(&self, t: Duration) -> Standing<'_> {
        let settled_by = t.saturating_sub(LAG);
        let mut failing = Vec::new();
        let mut good = None;
        for name in &self.config_at(t).upstreams {
            let Some(probe) = self.last_probe(name, t).filter(|p| p.at <= settled_by) else {
                continue;
            };
            if self.contradicted(name, probe) {
                continue;
            }
            if !probe.passed {
                failing.push((*name, probe));
            } else if good.is_none() && self.back_everywhere(name, probe, t) {
                good = Some((*name, probe));
            }
        }
        Standing { failing, good }
    }

    /// Whether `probe` timed out while `name` answered real requests: it then counts neither
    /// way (a probe stuck behind pages says nothing against a backend serving them).
    fn contradicted(&self, name: &str, probe: &Settled) -> bool {
        probe.timed_out
            && self.served.get(name).is_some_and(|times| {
                count_within(times, probe.sent.saturating_sub(LAG), probe.at) > 0
            })
    }

    /// Whether every worker routes at `t` as if `name` accepts connections, its last probe having
    /// passed: no request found it refusing since.
    fn back_everywhere(&self, name: &str, probe: &Settled, t: Duration) -> bool {
        !self.refused_within(name, probe.at, t)
    }

    /// (e), per backend, per stretch of membership under one prober.
    fn probing(&self) -> Result<(), String> {
        let interval = self.run.history.interval;
        for name in NAMES {
            let sent = self.sent.get(name).map(Vec::as_slice).unwrap_or_default();
            for (from, to) in self.stretches(name) {
                let counted: Vec<Duration> = sent
                    .iter()
                    .copied()
                    .filter(|t| (from..to).contains(t) && !self.maybe_ejected(name, *t))
                    .collect();
                let length = to - from;
                let windows = length.as_nanos().div_ceil(interval.as_nanos());
                let bound = usize::try_from(windows).unwrap_or(usize::MAX) + 1;
                if counted.len() > bound {
                    return Err(format!(
                        "(e) {name} got {} probes within {from:?}..{to:?} ({length:?}, interval \
                         {interval:?}), more than {bound}: sent at {counted:?}",
                        counted.len()
                    ));
                }
            }
        }
        Ok(())
    }

    /// The stretches of time in which `name` stays configured and the same VM probes.
    fn stretches(&self, name: &str) -> Vec<(Duration, Duration)> {
        let mut cuts: Vec<(Duration, bool)> = Vec::new();
        let mut member = false;
        for config in &self.run.configs {
            let now_member = config.upstreams.contains(&name);
            if now_member != member {
                cuts.push((config.from, now_member));
                member = now_member;
            }
        }
        let mut stretches = Vec::new();
        let mut open: Option<Duration> = None;
        for (at, joins) in cuts {
            if joins {
                open = Some(at);
            } else if let Some(from) = open.take() {
                stretches.extend(self.split_at_takeovers(from, at));
            }
        }
        if let Some(from) = open {
            stretches.extend(self.split_at_takeovers(from, self.end));
        }
        stretches
    }

    fn split_at_takeovers(&self, from: Duration, to: Duration) -> Vec<(Duration, Duration)> {
        let mut bounds = vec![from];
        bounds.extend(self.takeovers.iter().filter(|t| from < **t && **t < to));
        bounds.push(to);
        bounds.windows(2).map(|w| (w[0], w[1])).collect()
    }
}

/// Drives random histories with `workers` until `EVENTS_PER_TEST` steps were driven. The
/// histories are drawn from a fixed seed, so every run checks the same ones and a failure is a
/// change in the module, never a draw; `PROPTEST_RNG_SEED=<n>` draws others.
fn explore(workers: RangeInclusive<usize>) {
    let started = Instant::now();
    let driven = RefCell::new(Driven::default());
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .unwrap_or(SEED);
    let mut round = 0;
    while driven.borrow().events < EVENTS_PER_TEST {
        let mut runner = TestRunner::new(RunnerConfig {
            cases: 16,
            failure_persistence: None,
            max_shrink_iters: 4096,
            max_shrink_time: 120_000,
            rng_seed: RngSeed::Fixed(seed.wrapping_add(round)),
            ..RunnerConfig::default()
        });
        round += 1;
        let result = runner.run(&history(workers.clone()), |history| {
            let ran = drive(&history).map_err(TestCaseError::fail)?;
            driven.borrow_mut().add(ran);
            Ok(())
        });
        if let Err(e) = result {
            panic!("{e}");
        }
    }
    let driven = driven.into_inner();
    println!(
        "{} events over {} histories with {workers:?} workers ({} user requests, {} of them \
         routed while a backend was failing and another good, {} probes, {} status pages, {:.0?} \
         virtual) in {:.1?}",
        driven.events,
        driven.histories,
        driven.requests,
        driven.contested,
        driven.probes,
        driven.samples,
        driven.virtual_time,
        started.elapsed()
    );
}

#[test]
fn with_one_or_two_workers_any_history_keeps_every_promise() {
    explore(1..=2);
}

#[test]
fn with_three_or_four_workers_any_history_keeps_every_promise() {
    explore(3..=4);
}

/// The shortest history found for a defect: b0's hung requests time out after a
/// reconfiguration put b5 where b0 was, and b5, never sent a request, is ejected for them (a
/// request's outcome is charged to whichever backend holds its position when the answer comes).
/// The histories above reconfigure only with no request in flight until this passes.
#[test]
fn a_removed_backends_timeouts_are_not_charged_to_the_backend_that_took_its_place() {
    let interval = Duration::from_secs(5);
    let mut host = Host::from_file(
        UPCHECK_WASM,
        HostOptions {
            workers: 1,
            ..HostOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    host.upstream("b0")
        .path("/up", Behaviour::status(200))
        .others(Behaviour::Hang);
    host.upstream("b5");
    host.upstream("b4");
    let ok = |result: Result<(), HostError>| result.unwrap_or_else(|e| panic!("{e}"));
    ok(host.start(&plugin_config(&["b0"], 50, interval)));
    ok(host.advance(Duration::from_secs(1)));
    for k in 1..=3 {
        host.send(ms(50) * k, RequestSpec::default());
    }
    ok(host.advance(ms(150)));
    ok(host.reconfigure(&plugin_config(&["b5", "b4"], 50, interval)));
    ok(host.advance(Duration::from_secs(16)));
    assert_eq!(host.requests_routed("b5"), 0);
    let ejected: Vec<String> = host
        .logs()
        .into_iter()
        .map(|line| line.to_string())
        .filter(|line| line.contains("b5 ejected"))
        .collect();
    assert!(ejected.is_empty(), "{ejected:#?}");
}

/// The shortest history found for a second defect: a request finds b0 refusing 5 ms before b0's
/// probe passes. The prober has not seen the refusal yet (it reads the shared failures at its
/// tick), finds nothing changed, and publishes the probe only at its next tick; a worker whose
/// tick falls just before the prober's takes it in one tick later still. For up to two ticks
/// that worker keeps b0 out of rotation and sends b1, whose probes fail, the requests.
#[test]
fn a_backend_whose_probe_passes_just_after_a_refusal_is_back_on_every_worker_within_one_tick() {
    let mut host = Host::from_file(
        UPCHECK_WASM,
        HostOptions {
            workers: 2,
            ..HostOptions::default()
        },
    )
    .unwrap_or_else(|e| panic!("{UPCHECK_WASM} loads (run `make build`): {e}"));
    host.upstream("b0")
        .path("/up", Behaviour::status(200).after(ms(210)));
    host.upstream("b1").path("/up", Behaviour::status(502));
    let ok = |result: Result<(), HostError>| result.unwrap_or_else(|e| panic!("{e}"));
    ok(host.start(&plugin_config(&["b0", "b1"], 50, Duration::from_secs(10))));
    // Worker 2 restarted at 179 ms ticks 21 ms before the others, the prober (vm0) among them.
    host.stop_vm(2);
    ok(host.advance(ms(179)));
    ok(host.restart_vm(2));
    let second_probe = |host: &Host| {
        let calls = host.calls();
        calls.iter().filter(|c| c.cluster == "b0").nth(1).cloned()
    };
    while second_probe(&host).is_none() {
        ok(host.advance(ms(1)));
    }
    let sent = second_probe(&host).map(|c| c.sent).unwrap_or_default();
    host.upstream("b0").others(Behaviour::Refuse);
    ok(host.advance((sent + ms(205)).saturating_sub(host.now())));
    let refused = host.send(Duration::ZERO, RequestSpec::default());
    ok(host.advance(Duration::ZERO));
    assert_eq!(
        host.records()[refused].flags & UF,
        UF,
        "b0 refused a request"
    );
    host.upstream("b0").others(Behaviour::status(200));
    for k in 1..=60 {
        host.send(ms(10) * k, RequestSpec::default());
    }
    ok(host.advance(ms(600)));
    let passed = second_probe(&host).and_then(|c| c.delivered);
    let passed = passed.unwrap_or_else(|| panic!("b0's second probe settled"));
    let late: Vec<String> = host
        .records()
        .iter()
        .filter(|r| r.routed.is_some_and(|t| t >= passed + LAG))
        .filter(|r| r.upstream.as_deref() == Some("b1"))
        .map(|r| format!("{:?} by vm{}", r.routed.unwrap_or_default(), r.worker))
        .collect();
    assert!(
        late.is_empty(),
        "b0's probe passed at {passed:?}, yet b1 got requests routed at {late:?}"
    );
}

/// The shortest history found for a third defect: a worker probing for the configuration in
/// force is reconfigured, another VM takes the new configuration's lease and publishes b0's
/// failed probe and b2's passing one; a probe answer reaches the worker before its next tick, and
/// with it a read of the probe table in which it passes over its own backends, as the prober it
/// still is. At the tick it loses the lease, but the table reads as seen: it routes a parked
/// request to b0 a second later, as if nothing were known.
#[test]
fn a_worker_that_loses_the_lease_takes_in_what_it_passed_over_while_it_probed() {
    let history = History {
        workers: 1,
        interval: Duration::from_micros(2000000),
        upstreams: vec!["b5"],
        max_ejection_percent: 0,
        steps: vec![
            Step::Wait(Duration::from_micros(105000)),
            Step::Wait(Duration::from_micros(253000)),
            Step::Burst {
                count: 9,
                every: Duration::from_micros(20000),
            },
            Step::Wait(Duration::from_micros(297000)),
            Step::Burst {
                count: 7,
                every: Duration::from_micros(5000),
            },
            Step::Burst {
                count: 10,
                every: Duration::from_micros(5000),
            },
            Step::Burst {
                count: 5,
                every: Duration::from_micros(50000),
            },
            Step::Burst {
                count: 3,
                every: Duration::from_micros(200000),
            },
            Step::Reconfigure {
                upstreams: vec!["b3", "b1", "b5", "b0", "b4"],
                max_ejection_percent: 0,
            },
            Step::Burst {
                count: 12,
                every: Duration::from_micros(5000),
            },
            Step::Wait(Duration::from_micros(1606000)),
            Step::Wait(Duration::from_micros(1419000)),
            Step::Burst {
                count: 18,
                every: Duration::from_micros(5000),
            },
            Step::Wait(Duration::from_micros(106000)),
            Step::Burst {
                count: 3,
                every: Duration::from_micros(50000),
            },
            Step::Burst {
                count: 2,
                every: Duration::from_micros(50000),
            },
            Step::Stop(0),
            Step::Wait(Duration::from_micros(2289000)),
            Step::Wait(Duration::from_micros(735000)),
            Step::Wait(Duration::from_micros(60000)),
            Step::Burst {
                count: 16,
                every: Duration::from_micros(50000),
            },
            Step::Burst {
                count: 14,
                every: Duration::from_micros(50000),
            },
            Step::Restart(0),
            Step::Burst {
                count: 10,
                every: Duration::from_micros(5000),
            },
            Step::Burst {
                count: 13,
                every: Duration::from_micros(200000),
            },
            Step::Wait(Duration::from_micros(1025000)),
            Step::Burst {
                count: 12,
                every: Duration::from_micros(50000),
            },
            Step::Wait(Duration::from_micros(250000)),
            Step::Burst {
                count: 17,
                every: Duration::from_micros(5000),
            },
            Step::Wait(Duration::from_micros(243000)),
            Step::Wait(Duration::from_micros(838000)),
            Step::Probes("b1", Probe::Soft(502)),
            Step::Burst {
                count: 17,
                every: Duration::from_micros(5000),
            },
            Step::Burst {
                count: 12,
                every: Duration::from_micros(50000),
            },
            Step::Wait(Duration::from_micros(265000)),
            Step::Wait(Duration::from_micros(2019000)),
            Step::Probes("b5", Probe::Hang),
            Step::Burst {
                count: 15,
                every: Duration::from_micros(20000),
            },
            Step::Burst {
                count: 5,
                every: Duration::from_micros(5000),
            },
            Step::Wait(Duration::from_micros(2423000)),
            Step::Probes("b0", Probe::Soft(502)),
            Step::Wait(Duration::from_micros(1069000)),
            Step::Burst {
                count: 1,
                every: Duration::from_micros(20000),
            },
            Step::Burst {
                count: 5,
                every: Duration::from_micros(5000),
            },
            Step::Reconfigure {
                upstreams: vec!["b1"],
                max_ejection_percent: 0,
            },
            Step::Wait(Duration::from_micros(67000)),
            Step::Wait(Duration::from_micros(186000)),
            Step::Burst {
                count: 1,
                every: Duration::from_micros(20000),
            },
            Step::Reconfigure {
                upstreams: vec!["b0", "b2"],
                max_ejection_percent: 0,
            },
            Step::Burst {
                count: 1,
                every: Duration::from_micros(5000),
            },
        ],
    };
    if let Err(e) = drive(&history) {
        panic!("{e}");
    }
}
