//! What the fleet costs as it grows: N balancers (N = 1, 5, 10, 25 and 50 with a lease TTL of
//! 3 s, and 50 again with the default 6 s), each a host process of its own (a main-thread VM and
//! one worker running the real upcheck.wasm, with shared data of its own), in front of the same
//! ten backends, sharing one real etcd (a single member on 127.0.0.1) through its JSON gateway
//! ([`Host::real_cluster`]). For each fleet it prints etcd's requests a second by kind, the keys
//! under the prefix and what one read of them weighs, the CPU etcd and the hosts used, probes
//! per backend per interval across the fleet, duties per balancer, and how far the virtual
//! clocks trailed real time.
//!
//! Why: one prober per backend is the fleet's promise whatever its size, and each balancer's
//! read of the whole prefix every 500 ms its known cost, which grows with N twice over: N
//! readers, and each balancer's keys (its registration, its failures per backend) in every
//! answer.
//!
//! Pacing: etcd's leases expire in real time, so the virtual clocks follow it. In rounds, every
//! host is advanced to the real time elapsed since the fleet started, at least one tick (20 ms)
//! a round; when the hosts take longer than a tick to run a round, the next round covers more
//! virtual time, and the table's lag (real time past the virtual at the end of a round: mean,
//! longest) says by how much the virtual clocks trailed. Each etcd answer reaches its VM in the
//! first round after it arrived.
//!
//! Timings are printed, never asserted (the machine is shared). Asserted: no VM traps, etcd
//! answers reads, and no backend goes unprobed for longer than a lease TTL and [`GAP`]
//! intervals, whether the fleet shares the probing or has fallen back to probing alone.
//!
//! It needs etcd (`UPCHECK_ETCD`, which `make etcd` sets) and about two minutes, so plain
//! `cargo test` leaves it out and `make host-test` runs it: `cargo test --profile host-test -p
//! upcheck-host-tests --test in_host fleet_scale:: -- --ignored --nocapture` (`make fleet-scale`).

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use upcheck_e2e::etcd::Etcd;
use upcheck_host_tests::{Host, HostError, HostOptions, UPCHECK_WASM};

/// The fleets measured, in turn: how many balancers, and their lease TTL in seconds (the fleet's
/// calls to etcd time out after a third of it). The last is the largest at the default TTL.
const FLEETS: [(usize, u64); 6] = [(1, 3), (5, 3), (10, 3), (25, 3), (50, 3), (50, 6)];
/// Backends behind every balancer: app0..app9.
const BACKENDS: usize = 10;
/// The probe interval.
const INTERVAL: Duration = Duration::from_secs(1);
/// From the start until the measurement: leases granted, balancers registered, duties claimed
/// and spread.
const SETTLE: Duration = Duration::from_secs(5);
/// How long each fleet is measured.
const MEASURE: Duration = Duration::from_secs(8);
/// The shortest round: the module's tick.
const ROUND: Duration = Duration::from_millis(20);
/// Every backend is probed at least once in a lease TTL and this many intervals: a duty whose
/// holder stopped answering passes on within a TTL and an interval, and a balancer without
/// etcd falls back to probing everything itself within a TTL.
const GAP: u32 = 2;
/// etcd's gateway paths by the name the table gives them.
const KINDS: [(&str, &str); 5] = [
    ("range", "/v3/kv/range"),
    ("put", "/v3/kv/put"),
    ("txn", "/v3/kv/txn"),
    ("keepalive", "/v3/lease/keepalive"),
    ("grant", "/v3/lease/grant"),
];

/// The plugin configuration of every balancer of the fleet sharing `prefix`, with leases of
/// `ttl` seconds.
fn plugin(prefix: &str, ttl: u64) -> String {
    let upstreams: Vec<String> = (0..BACKENDS)
        .map(|b| format!(r#"{{"name": "app{b}"}}"#))
        .collect();
    format!(
        r#"{{"upstreams": [{}],
            "health_checks": {{"active": {{"path": "/up", "interval": "1s", "timeout": "500ms"}}}},
            "fleet": {{"cluster": "etcd", "prefix": "{prefix}", "lease_ttl": "{ttl}s"}}}}"#,
        upstreams.join(", ")
    )
}

/// N balancers on clocks paced to real time.
struct Fleet {
    hosts: Vec<Host>,
    /// Real time at virtual time zero of every host.
    origin: Instant,
    /// Per round: the virtual instant it advanced the hosts to, and how far real time was
    /// past it when the round ended.
    rounds: Vec<(Duration, Duration)>,
}

impl Fleet {
    fn start(n: usize, ttl: u64, prefix: &str, etcd: SocketAddr) -> Result<Fleet, HostError> {
        let config = plugin(prefix, ttl);
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
            host.real_cluster("etcd", etcd);
            host.start(&config)?;
            hosts.push(host);
        }
        Ok(Fleet {
            hosts,
            origin: Instant::now(),
            rounds: Vec::new(),
        })
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

/// What one fleet size measured.
struct Row {
    n: usize,
    /// The lease TTL, in seconds.
    ttl: u64,
    /// etcd requests dispatched by the fleet, per second, by kind (as [`KINDS`]).
    per_second: Vec<f64>,
    /// Answers other than 200 from etcd (or Envoy's 503/504 instead).
    not_ok: usize,
    /// Keys under the prefix at the end, by kind: balancers, duty, active, failures.
    keys: [usize; 4],
    /// Mean bytes of a read's answer.
    read_bytes: f64,
    /// Real time a read took: median, longest.
    read_took: (Duration, Duration),
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

    /// The keys under `prefix`, counted by their kind (the segment after `v1/`), as [`Row::keys`].
    fn keys(&self, prefix: &str) -> Result<[usize; 4], Box<dyn Error>> {
        let mut keys = [0; 4];
        for (key, _, _) in self.runtime.block_on(self.etcd.range(prefix))? {
            let kind = key.split('/').skip_while(|s| *s != "v1").nth(1);
            let at = ["balancers", "duty", "active", "failures"]
                .iter()
                .position(|k| Some(*k) == kind);
            if let Some(at) = at {
                keys[at] += 1;
            }
        }
        Ok(keys)
    }
}

fn measure(n: usize, ttl: u64, store: &Store) -> Result<Row, Box<dyn Error>> {
    let prefix = format!("bench/n{n}-ttl{ttl}");
    let mut fleet = Fleet::start(n, ttl, &prefix, store.client)?;
    fleet.run(SETTLE)?;
    let cpu_before = (cpu(store.pid), cpu(std::process::id()));
    fleet.run(SETTLE + MEASURE)?;
    let cpu_after = (cpu(store.pid), cpu(std::process::id()));
    let keys = store.keys(&format!("{prefix}/"))?;
    let window = SETTLE..SETTLE + MEASURE;
    let seconds = MEASURE.as_secs_f64();

    let mut kinds = vec![0usize; KINDS.len()];
    let mut probes: BTreeMap<String, Vec<Duration>> = (0..BACKENDS)
        .map(|b| (format!("app{b}"), Vec::new()))
        .collect();
    for call in fleet.hosts.iter().flat_map(Host::calls) {
        if !window.contains(&call.sent) {
            continue;
        }
        if let Some(times) = probes.get_mut(&call.cluster) {
            times.push(call.sent);
        } else if let Some(k) = KINDS.iter().position(|(_, path)| *path == call.path) {
            kinds[k] += 1;
        }
    }
    let answered: Vec<_> = fleet
        .hosts
        .iter()
        .flat_map(Host::real_calls)
        .filter(|c| window.contains(&c.sent))
        .collect();
    let not_ok = answered.iter().filter(|c| c.status != 200).count();
    let reads: Vec<_> = answered
        .iter()
        .filter(|c| c.path == "/v3/kv/range" && c.status == 200)
        .collect();
    assert!(
        !reads.is_empty(),
        "with {n} balancers etcd answered none of their reads"
    );
    let mut took: Vec<Duration> = reads.iter().map(|c| c.took).collect();
    took.sort();

    let intervals = MEASURE.as_secs_f64() / INTERVAL.as_secs_f64();
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
                    gap <= Duration::from_secs(ttl) + INTERVAL * GAP,
                    "{backend} with {n} balancers went {gap:?} unprobed (at {t:?})"
                );
            }
            last = Some(t);
        }
    }
    let per_backend: Vec<f64> = probes
        .values()
        .map(|t| t.len() as f64 / intervals)
        .collect();

    let gauge = |host: &Host, name: &str| host.metric(name).unwrap_or(0);
    let duties: Vec<u64> = fleet
        .hosts
        .iter()
        .map(|h| {
            (0..BACKENDS)
                .map(|b| gauge(h, &format!("upcheck.app{b}.probe_duty")))
                .sum()
        })
        .collect();
    let counted: Vec<u64> = fleet
        .hosts
        .iter()
        .map(|h| gauge(h, "upcheck.fleet_balancers"))
        .collect();
    let local = fleet
        .hosts
        .iter()
        .filter(|h| gauge(h, "upcheck.fleet_local") == 1)
        .count();
    let lags: Vec<Duration> = fleet
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
    let per_second = |d: Duration| d.as_secs_f64() / seconds;
    Ok(Row {
        n,
        ttl,
        per_second: kinds.iter().map(|&k| k as f64 / seconds).collect(),
        not_ok,
        keys,
        read_bytes: reads.iter().map(|c| c.answer_bytes).sum::<usize>() as f64 / reads.len() as f64,
        read_took: (
            took.get(took.len() / 2).copied().unwrap_or_default(),
            took.last().copied().unwrap_or_default(),
        ),
        cpu: (
            per_second(cpu_after.0.saturating_sub(cpu_before.0)),
            per_second(cpu_after.1.saturating_sub(cpu_before.1)),
        ),
        probes: (
            per_backend.iter().copied().fold(f64::INFINITY, f64::min),
            per_backend.iter().sum::<f64>() / per_backend.len() as f64,
            per_backend.iter().copied().fold(0.0, f64::max),
        ),
        duties: min_max(&duties),
        counted: min_max(&counted),
        local,
        lag: (
            lags.iter().sum::<Duration>() / u32::try_from(lags.len().max(1)).unwrap_or(1),
            lags.iter().copied().max().unwrap_or_default(),
        ),
    })
}

fn print(rows: &[Row]) {
    let kinds: Vec<&str> = KINDS.iter().map(|(name, _)| *name).collect();
    println!(
        "\n| N | lease TTL | etcd requests/s | {} | not 200 | keys (balancers, duty, active, failures) | \
         read answer, bytes | read took, ms (median, max) | etcd CPU | host CPU | \
         probes per backend per interval (min/mean/max) | duties per balancer | \
         balancers counted | fallen back | lag, ms (mean, max) |",
        kinds.join(" | ")
    );
    println!("|{}", " --- |".repeat(15 + kinds.len()));
    for r in rows {
        let by_kind: Vec<String> = r.per_second.iter().map(|v| format!("{v:.1}")).collect();
        let [balancers, duty, active, failures] = r.keys;
        println!(
            "| {} | {} s | {:.1} | {} | {} | {balancers}, {duty}, {active}, {failures} | {:.0} | {}, {} | \
             {:.0} % | {:.0} % | {:.2} / {:.2} / {:.2} | {}–{} | {}–{} | {} | {}, {} |",
            r.n,
            r.ttl,
            r.per_second.iter().sum::<f64>(),
            by_kind.join(" | "),
            r.not_ok,
            r.read_bytes,
            r.read_took.0.as_millis(),
            r.read_took.1.as_millis(),
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
    for (n, ttl) in FLEETS {
        let row = measure(n, ttl, &store)?;
        print(std::slice::from_ref(&row));
        rows.push(row);
    }
    println!(
        "\n{BACKENDS} backends probed every {INTERVAL:?}, one worker per balancer; \
         each fleet measured over {MEASURE:?} after {SETTLE:?}; {:.0} s in all (and {:.0} s to \
         compile the module)",
        started.elapsed().as_secs_f64(),
        compiled.as_secs_f64()
    );
    print(&rows);
    Ok(())
}
