//! What the fleet costs etcd as it grows: N balancers (1, 10, 50 and 200), each a host process of
//! its own (a main-thread VM and one worker running the real upcheck.wasm, with shared data of
//! its own), in front of the same ten backends, sharing one real etcd (a single member on
//! 127.0.0.1) through its JSON gateway and, with the watch, a gRPC stream
//! ([`Host::real_cluster`]). For each fleet it prints etcd's load per balancer (requests, range
//! reads, bytes read and watch events a second) and what the module spent for it (its fuel, about
//! wasm instructions), the keys under the prefix, the CPU etcd and the hosts used, probes per
//! backend per interval across the fleet, duties per balancer, and how far the virtual clocks
//! trailed real time.
//!
//! Why: one prober per backend is the fleet's promise whatever its size, and what etcd is asked
//! its cost. Following the prefix with etcd's Watch (`fleet.watch_cluster`), a balancer reads it
//! once and then hears each change, so its load grows with what changes, not with the clock;
//! reading the whole prefix every 500 ms instead (without `watch_cluster`, as NGINX must) grows
//! with N twice over: N readers, and every balancer's keys in every answer. Each fleet that
//! follows with the watch is measured idle, then under traffic (users through every balancer,
//! one backend answering 502 to pages, so that failures, request counts and an ejection are
//! written); fleets that read on the clock are measured idle, beside them, for comparison.
//!
//! Pacing: etcd's leases expire in real time, so the virtual clocks follow it. In rounds, every
//! host is advanced to the real time elapsed since the fleet started, at least one tick (20 ms)
//! a round; when the hosts take longer than a tick to run a round, the next round covers more
//! virtual time, and the table's lag (real time past the virtual at the end of a round: mean,
//! longest) says by how much the virtual clocks trailed. Each etcd answer, and each message of a
//! watch, reaches its VM in the first round after it arrived.
//!
//! Timings are printed, never asserted (the machine is shared). Asserted: no VM traps, etcd
//! answers, no backend goes unprobed for longer than a lease TTL and [`GAP`] intervals (whether
//! the fleet shares the probing or has fallen back to probing alone), every balancer of a
//! watching fleet hears from its watch, and, idle, none reads the prefix more than
//! [`IDLE_READS`] times in a measured window.
//!
//! It needs etcd (`UPCHECK_ETCD`, which `make etcd` sets) and about two minutes, so plain
//! `cargo test` leaves it out and `make host-test` runs it: `cargo test --profile host-test -p
//! upcheck-host-tests --test in_host fleet_scale:: -- --ignored --nocapture` (`make fleet-scale`).
//! [`SETTLE`] and [`MEASURE`] are short so that it fits in that time beside the other suites of
//! `make test`; the 200 balancers run only with `UPCHECK_FLEET_SCALE_FULL=1`
//! ([`LARGEST_BY_DEFAULT`]).

use std::collections::BTreeMap;
use std::error::Error;
use std::fmt;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};
use upcheck_e2e::etcd::Etcd;
use upcheck_host_tests::{
    Behaviour, Host, HostError, HostOptions, Load, RequestSpec, UPCHECK_WASM,
};

/// How the balancers of a fleet follow the prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Following {
    /// One read, then etcd's Watch over a gRPC stream (`fleet.watch_cluster`).
    Watch,
    /// A read of the whole prefix every 500 ms (no `watch_cluster`).
    Clock,
}

impl fmt::Display for Following {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Following::Watch => "watch",
            Following::Clock => "clock",
        })
    }
}

/// The fleets measured, in turn: how they follow the prefix, and how many balancers. The largest
/// comes last, so that the leases it leaves behind expire after the measurements.
const FLEETS: [(Following, usize); 6] = [
    (Following::Clock, 10),
    (Following::Clock, 50),
    (Following::Watch, 1),
    (Following::Watch, 10),
    (Following::Watch, 50),
    (Following::Watch, 200),
];
/// Fleets larger than this run only when `UPCHECK_FLEET_SCALE_FULL` is set: at 200 balancers
/// the one thread that runs their 400 VMs falls seconds behind real time (each message of a
/// watch costs the module a take-in of the whole prefix), and under traffic past the leases.
const LARGEST_BY_DEFAULT: usize = 50;
/// Backends behind every balancer: app0..app9.
const BACKENDS: usize = 10;
/// The backend whose pages answer 502 (its `/up` 200), so that traffic makes failures to share.
const FAILING: &str = "app3";
/// The probe interval.
const INTERVAL: Duration = Duration::from_secs(1);
/// The lease TTL (the default); the fleet's calls to etcd time out after a third of it.
const TTL: Duration = Duration::from_secs(6);
/// From the start until the first measurement: leases granted, balancers registered, duties
/// claimed and spread, the watches in place.
const SETTLE: Duration = Duration::from_secs(4);
/// How long each fleet is measured idle, and again under traffic.
const MEASURE: Duration = Duration::from_secs(6);
/// User requests a second through each balancer under traffic: modest, so that 200 balancers
/// keep up with real time.
const USERS: u32 = 4;
/// The shortest round: the module's tick.
const ROUND: Duration = Duration::from_millis(20);
/// Every backend is probed at least once in a lease TTL and this many intervals: a duty whose
/// holder stopped answering passes on within a TTL and an interval, and a balancer without
/// etcd falls back to probing everything itself within a TTL.
const GAP: u32 = 2;
/// The most range reads one idle balancer that follows the watch makes in a measured window:
/// under 0.2 a second. Its one read comes before, and only a compaction (none here) asks for
/// another.
const IDLE_READS: usize = 1;
/// The kinds of keys under the prefix (the segment after `v1/`), as [`Row::keys`] counts them.
const KEY_KINDS: [&str; 6] = [
    "balancers",
    "duty",
    "active",
    "failures",
    "traffic",
    "ejected",
];

/// The plugin configuration of every balancer of the fleet sharing `prefix`.
fn plugin(prefix: &str, following: Following) -> String {
    let upstreams: Vec<String> = (0..BACKENDS)
        .map(|b| format!(r#"{{"name": "app{b}"}}"#))
        .collect();
    let watch = match following {
        Following::Watch => r#", "watch_cluster": "etcd_grpc""#,
        Following::Clock => "",
    };
    format!(
        r#"{{"upstreams": [{}],
            "health_checks": {{"active": {{"path": "/up", "interval": "1s", "timeout": "500ms"}}}},
            "fleet": {{"cluster": "etcd", "prefix": "{prefix}", "lease_ttl": "{}s"{watch}}}}}"#,
        upstreams.join(", "),
        TTL.as_secs()
    )
}

/// N balancers on clocks paced to real time.
struct Fleet {
    following: Following,
    hosts: Vec<Host>,
    /// Real time at virtual time zero of every host.
    origin: Instant,
    /// Per round: the virtual instant it advanced the hosts to, and how far real time was
    /// past it when the round ended.
    rounds: Vec<(Duration, Duration)>,
}

impl Fleet {
    fn start(
        following: Following,
        n: usize,
        prefix: &str,
        etcd: SocketAddr,
    ) -> Result<Fleet, HostError> {
        let config = plugin(prefix, following);
        let mut hosts = Vec::new();
        for _ in 0..n {
            let options = HostOptions {
                workers: 1,
                ..HostOptions::default()
            };
            let mut host = Host::from_file(UPCHECK_WASM, options)?;
            for b in 0..BACKENDS {
                host.upstream(&format!("app{b}"));
            }
            host.upstream(FAILING)
                .others(Behaviour::status(502))
                .path("/up", Behaviour::status(200));
            host.real_cluster("etcd", etcd);
            if following == Following::Watch {
                host.real_cluster("etcd_grpc", etcd);
            }
            host.start(&config)?;
            hosts.push(host);
        }
        Ok(Fleet {
            following,
            hosts,
            origin: Instant::now(),
            rounds: Vec::new(),
        })
    }

    /// The virtual time every host has reached.
    fn now(&self) -> Duration {
        self.rounds.last().map_or(Duration::ZERO, |(at, _)| *at)
    }

    /// Runs the fleet in paced rounds until virtual time `until`.
    fn run(&mut self, until: Duration) -> Result<(), HostError> {
        loop {
            let target = self.origin.elapsed().min(until);
            for host in &mut self.hosts {
                host.advance(target.saturating_sub(host.now()))?;
            }
            let behind = self.origin.elapsed().saturating_sub(target);
            self.rounds.push((target, behind));
            if target >= until {
                return Ok(());
            }
            let next = target + ROUND;
            if let Some(wait) = next.checked_sub(self.origin.elapsed()) {
                std::thread::sleep(wait);
            }
        }
    }

    /// What the fleet has been through so far: bytes of the watches' messages, the changes the
    /// balancers took in from them, and the fuel (about wasm instructions) their VMs spent.
    fn totals(&self) -> Totals {
        let hosts = || self.hosts.iter();
        Totals {
            stream_bytes: hosts()
                .flat_map(Host::real_streams)
                .map(|s| s.bytes_in)
                .sum(),
            events: hosts()
                .map(|h| h.metric("upcheck.fleet_watch_events").unwrap_or(0))
                .sum(),
            fuel: hosts()
                .flat_map(|h| h.fuel().into_values())
                .map(|f| f.fuel)
                .sum(),
        }
    }

    /// Runs the fleet for [`MEASURE`], `users` requests a second through each balancer, and
    /// measures it.
    fn measure(&mut self, users: u32, store: &Store, prefix: &str) -> Result<Row, Box<dyn Error>> {
        let start = self.now();
        let window = start..start + MEASURE;
        if users > 0 {
            let load = Load {
                rate: users,
                duration: MEASURE,
                request: RequestSpec::default(),
            };
            for host in &mut self.hosts {
                host.send_load(&load)?;
            }
        }
        let cpu_before = (cpu(store.pid), cpu(std::process::id()));
        let before = self.totals();
        self.run(window.end)?;
        let cpu_after = (cpu(store.pid), cpu(std::process::id()));
        let after = self.totals();
        let keys = store.keys(&format!("{prefix}/"))?;
        self.check(&window, users)?;

        let n = self.hosts.len();
        let per_balancer = |total: f64| total / n as f64 / MEASURE.as_secs_f64();
        let answered: Vec<_> = self
            .hosts
            .iter()
            .flat_map(Host::real_calls)
            .filter(|c| window.contains(&c.sent))
            .collect();
        let calls = self
            .hosts
            .iter()
            .flat_map(Host::calls)
            .filter(|c| c.cluster == "etcd" && window.contains(&c.sent))
            .count();
        let reads = self
            .hosts
            .iter()
            .flat_map(Host::calls)
            .filter(|c| c.path == "/v3/kv/range" && window.contains(&c.sent))
            .count();
        let streams = self
            .hosts
            .iter()
            .flat_map(Host::real_streams)
            .filter(|s| window.contains(&s.opened))
            .count();
        let answer_bytes: usize = answered.iter().map(|c| c.answer_bytes).sum();

        let gauge = |host: &Host, name: &str| host.metric(name).unwrap_or(0);
        let duties: Vec<u64> = self
            .hosts
            .iter()
            .map(|h| {
                (0..BACKENDS)
                    .map(|b| gauge(h, &format!("upcheck.app{b}.probe_duty")))
                    .sum()
            })
            .collect();
        let counted: Vec<u64> = self
            .hosts
            .iter()
            .map(|h| gauge(h, "upcheck.fleet_balancers"))
            .collect();
        let lags: Vec<Duration> = self
            .rounds
            .iter()
            .filter(|(at, _)| window.contains(at))
            .map(|(_, behind)| *behind)
            .collect();
        let min_max = |v: &[u64]| {
            (
                v.iter().copied().min().unwrap_or(0),
                v.iter().copied().max().unwrap_or(0),
            )
        };
        let cpu_share = |before: Duration, after: Duration| {
            after.saturating_sub(before).as_secs_f64() / MEASURE.as_secs_f64()
        };
        Ok(Row {
            following: self.following,
            n,
            users,
            requests: per_balancer((calls + streams) as f64),
            reads: per_balancer(reads as f64),
            bytes: per_balancer(
                (answer_bytes as u64 + after.stream_bytes - before.stream_bytes) as f64,
            ),
            events: per_balancer(after.events.saturating_sub(before.events) as f64),
            fuel: per_balancer((after.fuel - before.fuel) as f64),
            not_ok: answered.iter().filter(|c| c.status != 200).count(),
            keys,
            cpu: (
                cpu_share(cpu_before.0, cpu_after.0),
                cpu_share(cpu_before.1, cpu_after.1),
            ),
            probes: self.probes(&window),
            duties: min_max(&duties),
            counted: min_max(&counted),
            local: self
                .hosts
                .iter()
                .filter(|h| gauge(h, "upcheck.fleet_local") == 1)
                .count(),
            lag: (
                lags.iter().sum::<Duration>() / u32::try_from(lags.len().max(1)).unwrap_or(1),
                lags.iter().copied().max().unwrap_or_default(),
            ),
        })
    }

    /// What every window must show: etcd answered, the watches were heard, and an idle
    /// balancer that follows the watch left the prefix unread.
    fn check(&self, window: &Range<Duration>, users: u32) -> Result<(), Box<dyn Error>> {
        let n = self.hosts.len();
        let answered = self
            .hosts
            .iter()
            .flat_map(Host::real_calls)
            .any(|c| window.contains(&c.sent) && c.status == 200);
        if !answered {
            return Err(format!("with {n} balancers etcd answered none of their calls").into());
        }
        if self.following == Following::Clock {
            return Ok(());
        }
        for (i, host) in self.hosts.iter().enumerate() {
            let heard: u64 = host.real_streams().iter().map(|s| s.messages_in).sum();
            if heard == 0 {
                return Err(format!("balancer {i} of {n} heard nothing from its watch").into());
            }
            let reads = host
                .calls()
                .iter()
                .filter(|c| c.path == "/v3/kv/range" && window.contains(&c.sent))
                .count();
            if users == 0 && reads > IDLE_READS {
                return Err(format!(
                    "balancer {i} of {n} read the prefix {reads} times in {MEASURE:?}, idle, \
                     though it follows the watch"
                )
                .into());
            }
        }
        Ok(())
    }

    /// Probes per backend per interval over `window` across the fleet (min, mean, max over the
    /// backends); fails if a backend went unprobed for longer than a lease TTL and [`GAP`]
    /// intervals.
    fn probes(&self, window: &Range<Duration>) -> (f64, f64, f64) {
        let mut probes: BTreeMap<String, Vec<Duration>> = (0..BACKENDS)
            .map(|b| (format!("app{b}"), Vec::new()))
            .collect();
        for call in self.hosts.iter().flat_map(Host::calls) {
            if let (Some(times), true) =
                (probes.get_mut(&call.cluster), window.contains(&call.sent))
            {
                times.push(call.sent);
            }
        }
        let n = self.hosts.len();
        for (backend, times) in &mut probes {
            times.sort();
            let edges = std::iter::once(window.start)
                .chain(times.iter().copied())
                .chain(std::iter::once(window.end));
            let mut last = None;
            for t in edges {
                if let Some(before) = last {
                    let gap: Duration = t - before;
                    assert!(
                        gap <= TTL + INTERVAL * GAP,
                        "{backend} with {n} balancers went {gap:?} unprobed (at {t:?})"
                    );
                }
                last = Some(t);
            }
        }
        let intervals = MEASURE.as_secs_f64() / INTERVAL.as_secs_f64();
        let per_backend: Vec<f64> = probes
            .values()
            .map(|t| t.len() as f64 / intervals)
            .collect();
        (
            per_backend.iter().copied().fold(f64::INFINITY, f64::min),
            per_backend.iter().sum::<f64>() / per_backend.len() as f64,
            per_backend.iter().copied().fold(0.0, f64::max),
        )
    }
}

/// What a fleet has been through, summed over its balancers ([`Fleet::totals`]).
struct Totals {
    stream_bytes: u64,
    events: u64,
    fuel: u64,
}

/// CPU time process `pid` has used so far (user and system), from `/proc/<pid>/stat` in
/// USER_HZ (100 a second on Linux).
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    Duration::from_millis(ticks * 10)
}

/// The pid of the etcd this test process started.
fn etcd_pid() -> Option<u32> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            let (command, rest) = stat.split_once(") ")?;
            let parent = rest.split_whitespace().nth(1)?;
            (command.ends_with("(etcd") && parent == me).then_some(pid)
        })
}

/// What one fleet measured over one window.
struct Row {
    following: Following,
    n: usize,
    /// User requests a second through each balancer.
    users: u32,
    /// Per balancer a second: calls to etcd and watch streams opened.
    requests: f64,
    /// Per balancer a second: range reads of the prefix.
    reads: f64,
    /// Per balancer a second: bytes of etcd's answers and of the watch's messages.
    bytes: f64,
    /// Per balancer a second: changes taken in from the watch.
    events: f64,
    /// Per balancer a second: fuel (about wasm instructions) its VMs spent.
    fuel: f64,
    /// Answers other than 200 from etcd (or Envoy's 503/504 instead).
    not_ok: usize,
    /// Keys under the prefix at the end, by kind, as [`KEY_KINDS`].
    keys: [usize; KEY_KINDS.len()],
    /// CPU time per second of etcd, and of this process (the hosts and their calls' threads).
    cpu: (f64, f64),
    /// Probes per backend per interval across the fleet: min, mean, max over the backends.
    probes: (f64, f64, f64),
    /// Duties held per balancer at the end: min, max.
    duties: (u64, u64),
    /// Balancers each counted at the end: min, max.
    counted: (u64, u64),
    /// Balancers fallen back to probing everything themselves at the end.
    local: usize,
    /// Virtual clocks behind real time at the end of a round: mean, longest.
    lag: (Duration, Duration),
}

/// The etcd of the test: its client address, its pid, and a runtime to read it with.
struct Store {
    etcd: Etcd,
    client: SocketAddr,
    pid: u32,
    runtime: tokio::runtime::Runtime,
}

impl Store {
    fn start() -> Result<Store, Box<dyn Error>> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let etcd = runtime.block_on(Etcd::start(1))?;
        let client = *etcd.clients().first().ok_or("etcd has no client address")?;
        let pid = etcd_pid().ok_or("etcd's process not found among this test's children")?;
        Ok(Store {
            etcd,
            client,
            pid,
            runtime,
        })
    }

    /// The keys under `prefix`, counted by their kind, as [`Row::keys`].
    fn keys(&self, prefix: &str) -> Result<[usize; KEY_KINDS.len()], Box<dyn Error>> {
        let mut keys = [0; KEY_KINDS.len()];
        for (key, _, _) in self.runtime.block_on(self.etcd.range(prefix))? {
            let kind = key.split('/').skip_while(|s| *s != "v1").nth(1);
            if let Some(at) = KEY_KINDS.iter().position(|k| Some(*k) == kind) {
                keys[at] += 1;
            }
        }
        Ok(keys)
    }
}

/// The fleet of `n` balancers following the prefix so, measured idle and, with the watch,
/// under traffic.
fn measure(following: Following, n: usize, store: &Store) -> Result<Vec<Row>, Box<dyn Error>> {
    let prefix = format!("bench/{following}-n{n}");
    let mut fleet = Fleet::start(following, n, &prefix, store.client)?;
    fleet.run(SETTLE)?;
    let mut rows = vec![fleet.measure(0, store, &prefix)?];
    if following == Following::Watch {
        rows.push(fleet.measure(USERS, store, &prefix)?);
    }
    Ok(rows)
}

fn print(rows: &[Row]) {
    println!(
        "\n| following | N | users/s per balancer | etcd requests/s per balancer | \
         range reads/s per balancer | KB read/s per balancer | watch events/s per balancer | \
         module, M instructions/s per balancer | not 200 | keys ({}) | etcd CPU | host CPU | \
         probes per backend per interval (min/mean/max) | duties per balancer | \
         balancers counted | fallen back | lag, ms (mean, max) |",
        KEY_KINDS.join(", ")
    );
    println!("|{}", " --- |".repeat(17));
    for r in rows {
        let keys: Vec<String> = r.keys.iter().map(usize::to_string).collect();
        println!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.1} | {:.1} | {:.0} | {} | {} | {:.0} % | {:.0} % | \
             {:.2} / {:.2} / {:.2} | {}–{} | {}–{} | {} | {}, {} |",
            r.following,
            r.n,
            r.users,
            r.requests,
            r.reads,
            r.bytes / 1000.0,
            r.events,
            r.fuel / 1e6,
            r.not_ok,
            keys.join(", "),
            r.cpu.0 * 100.0,
            r.cpu.1 * 100.0,
            r.probes.0,
            r.probes.1,
            r.probes.2,
            r.duties.0,
            r.duties.1,
            r.counted.0,
            r.counted.1,
            r.local,
            r.lag.0.as_millis(),
            r.lag.1.as_millis(),
        );
    }
}

#[test]
#[ignore = "needs etcd (UPCHECK_ETCD) and about two minutes: make host-test runs it"]
fn a_growing_fleet_keeps_its_backends_probed_and_prints_what_etcd_is_asked(
) -> Result<(), Box<dyn Error>> {
    let store = Store::start()?;
    let compiling = Instant::now();
    Host::from_file(UPCHECK_WASM, HostOptions::default())?;
    let compiled = compiling.elapsed();
    let started = Instant::now();
    let mut rows = Vec::new();
    let full = std::env::var_os("UPCHECK_FLEET_SCALE_FULL").is_some();
    for (following, n) in FLEETS {
        if n > LARGEST_BY_DEFAULT && !full {
            continue;
        }
        let measured = measure(following, n, &store)?;
        print(&measured);
        rows.extend(measured);
    }
    println!(
        "\n{BACKENDS} backends probed every {INTERVAL:?}, one worker per balancer, leases of \
         {TTL:?}; each fleet measured over {MEASURE:?} after {SETTLE:?}, idle, and with the \
         watch again under traffic ({USERS} users a second per balancer, {FAILING}'s pages \
         answering 502); {:.0} s in all (and {:.0} s to compile the module)",
        started.elapsed().as_secs_f64(),
        compiled.as_secs_f64()
    );
    print(&rows);
    Ok(())
}
