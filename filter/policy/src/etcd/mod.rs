//! Several balancers, one view of health, shared through etcd: this balancer's membership of the
//! fleet ([`Membership`]: its lease, its probe duties, what it publishes and what it reads), over
//! etcd's JSON gateway ([`gateway`]).
//!
//! With N balancers in front of M backends, each probing every backend, a backend gets N probes
//! per interval and each balancer must see a failure for itself. With a `fleet` object
//! ([`upcheck_config::fleet`]), the VM that probes for its Envoy ([`crate::lease`]) also speaks
//! for it in etcd, where the balancers of a pool meet under one prefix:
//!
//! - `{prefix}/v1/balancers/{lease}`: one key per balancer, living by its etcd lease, so the
//!   balancers can count themselves;
//! - `{prefix}/v1/duty/{backend}`: which balancer probes that backend, created only if absent
//!   (a transaction comparing its create revision with 0) and living by the holder's lease, so a
//!   balancer that dies or loses etcd loses its duties when its lease expires, and another takes
//!   them. Each balancer claims free duties up to its share (M / N, rounded up), starting at a
//!   place of its own in the list, and gives one back per tick while it holds more, so duties
//!   spread over the balancers rather than all landing on the first;
//! - `{prefix}/v1/active/{backend}`: the holder's probe state of that backend, published after
//!   each result and living by the holder's lease.
//! - `{prefix}/v1/failures/{lease}/{backend}`: the request failures each balancer's own process
//!   counted at that backend, living by its lease, which the others count toward `max_fails`
//!   ([`Membership::evidence`]);
//! - `{prefix}/v1/traffic/{lease}`: the request outcomes each balancer's process counted, per
//!   backend, living by its lease, which the others add to theirs in the peer comparison
//!   ([`traffic`]);
//! - `{prefix}/v1/ejected/{backend}`: an outlier ejection one balancer decided, living by a lease
//!   of its own that ends with it, which every other balancer holds until that end
//!   ([`ejections`]).
//!
//! Every balancer reads the prefix once and follows it with etcd's Watch over a gRPC stream
//! (`fleet.watch_cluster`, [`watch`]), or, without one (a host without gRPC streams), reads it
//! every [`READ_EVERY`] (a read that failed once more after [`READ_AGAIN`]); it takes a
//! published result in as its own workers take its prober's
//! ([`crate::pool::Pool::fleet_view`]); the backends whose duty is elsewhere are not probed
//! here.
//!
//! Fail local, never fail closed: without a usable read for one lease TTL (etcd down, slow, or
//! answering garbage), a balancer probes every backend itself again, exactly as without a
//! `fleet`, and says so once; when etcd answers again it rejoins without a burst (the backends it
//! probes keep their schedule, and it stops probing those another balancer holds). What etcd
//! holds is untrusted: a value that does not parse, was written by another version, or claims a
//! holder other than the lease it lives by is ignored with one log line per key. What can take a
//! backend out is what the balancers publish: a probe result of its duty holder, failures and
//! request counts under a balancer's lease, an ejection under a lease of its own; so whoever may
//! write the prefix can take backends out (up to the ejection cap and the fleet guard), and etcd's
//! role for the balancers should be the only one that may.
//!
//! The module is pure: requests go out as values ([`Request`]), the adapter sends them with
//! `dispatch_http_call` to the `fleet.cluster` and hands back each answer
//! ([`Membership::answered`]); what happened to say goes out as [`Note`]s.

pub mod ejections;
mod evidence;
pub mod gateway;
pub mod json;
pub mod shown;
pub mod traffic;
pub mod watch;

use crate::active::ActiveHealth;
use crate::level::Level;
use crate::outlier::Standing;
use crate::tables::{tagged, untagged};
use crate::time::Time;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use upcheck_config::fleet::Fleet as Settings;

/// How often the prefix is read: often enough that a result published by a duty holder reaches
/// every balancer within a second.
pub const READ_EVERY: Duration = Duration::from_millis(500);

/// How soon a read that failed is tried once more: a member that is down is refused at once, and
/// Envoy's round robin sends the next try to another member. A second failure in a row waits
/// [`READ_EVERY`] again, so an etcd that is down or overloaded is asked no more often than when
/// it answers.
pub const READ_AGAIN: Duration = Duration::from_millis(100);

/// How much of an etcd answer is read at most.
pub const MAX_ANSWER: usize = 4 << 20;

/// The version of the key layout and the values (the `v1` in every key).
const VERSION: u8 = 1;

/// At most this many keys with a bad value are remembered, so each is logged once.
const MAX_REFUSED: usize = 64;

/// One call to etcd, as a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `/v3/auth/authenticate`, for a token.
    Authenticate,
    /// `/v3/lease/grant`: this balancer's lease.
    Grant,
    /// `/v3/lease/keepalive` of the lease.
    KeepAlive,
    /// `/v3/kv/put` of this balancer's key.
    Register,
    /// `/v3/kv/range` of the prefix.
    Read,
    /// `/v3/kv/txn`: take this backend's probe duty if nobody holds it.
    Claim(String),
    /// `/v3/kv/txn`: give this backend's probe duty back.
    Release(String),
    /// `/v3/kv/put`: this backend's probe state.
    Publish(String, ActiveHealth),
    /// `/v3/kv/put`: the failures this balancer counted at this backend, as the value
    /// ([`Membership::evidence`]).
    Evidence(String, String),
    /// `/v3/kv/put`: the request outcomes this balancer counted ([`traffic`]).
    Traffic(traffic::Counts),
    /// `/v3/lease/grant`: a lease for this ejection of this backend, as long as it lasts
    /// ([`ejections`]).
    GrantEjection(String, Standing),
    /// `/v3/kv/put`: this backend's ejection, ending then, under its own lease.
    Eject(String, Time),
}

/// A request for the adapter to send to `fleet.cluster`: `POST path` with `body` (JSON), the
/// `authorization` header when `token` is set, and this timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What it is for; handed back with its token ([`Membership::sent`]).
    pub call: Call,
    /// The gateway's path.
    pub path: &'static str,
    /// The JSON body.
    pub body: String,
    /// etcd's auth token, when etcd has authentication on.
    pub token: Option<String>,
    /// How long to wait for the answer.
    pub timeout: Duration,
}

/// Something to log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Note {
    /// How loud.
    pub level: Level,
    /// What happened.
    pub text: String,
}

/// Where a backend's probe duty is, as this balancer sees it.
#[derive(Debug, Clone, PartialEq)]
pub enum Duty {
    /// Probed here: this balancer holds the duty, or the fleet is not in use (alone, or fallen
    /// back to local).
    Here,
    /// Probed by another balancer (or about to be, by whichever claims it first).
    Elsewhere {
        /// The holder's lease ID (its name in the fleet, shown in hex); `None` while nobody
        /// holds it.
        holder: Option<i64>,
        /// The probe state the holder published, if any.
        health: Option<ActiveHealth>,
    },
}

/// A published probe state, as etcd holds it: postcard behind a four-byte tag (`u`, `c`, `f`,
/// [`VERSION`]), as the shared-data tables are ([`crate::tables::tagged`]), so a value of another
/// version is refused, never misread.
#[derive(Debug, Serialize, Deserialize)]
struct Published {
    /// The publisher's lease ID.
    by: i64,
    /// The state.
    health: ActiveHealth,
}

impl Published {
    const TAG: [u8; 4] = [b'u', b'c', b'f', VERSION];
}

/// Where this balancer is in joining the fleet: whether it holds an etcd lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Joined {
    /// No lease: to be granted (after authenticating, with credentials).
    Out,
    /// A grant (or authentication) is on the wire.
    Joining,
    /// Holding this lease, last renewed then.
    In { lease: i64, kept: Time },
}

/// This balancer's membership of the fleet: its lease, what it last read, what is on the wire.
#[derive(Debug, Clone)]
pub struct Membership {
    settings: Settings,
    started: Time,
    joined: Joined,
    auth: Option<String>,
    registered: bool,
    on_wire: Vec<(u32, Call)>,
    /// When the last grant or authentication was asked for.
    tried: Option<Time>,
    /// When the prefix was last read, when a read last went out, and how many reads in a row
    /// have failed since.
    read: Option<Time>,
    asked: Option<Time>,
    failed_reads: u32,
    balancers: usize,
    /// By backend key, the holder's lease.
    duties: Vec<(String, i64)>,
    /// By backend key, the holder's published state.
    results: Vec<(String, i64, ActiveHealth)>,
    /// By backend key, what this balancer last published.
    published: Vec<(String, ActiveHealth)>,
    local: bool,
    why: String,
    refused: Vec<String>,
    notes: Vec<Note>,
    evidence: evidence::Evidence,
    traffic: traffic::PeerCounts,
    ejections: ejections::Ejections,
    follow: Option<watch::Follow>,
}

/// What a message on the watch's stream came to, for the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watched {
    /// Whether the stream stays open (else the adapter cancels it: etcd ended the watch, or the
    /// message was garbage; the next tick reads or reopens).
    pub keep: bool,
    /// Whether the fleet's view changed (keys taken in, or the view current again), so that the
    /// pool is to take it in now; changes that can wait for the tick (request counts) leave it
    /// unchanged until then.
    pub view_changed: bool,
}

/// A watch of the prefix for the adapter to open: a gRPC stream to `cluster`
/// ([`watch::SERVICE`], [`watch::METHOD`]) with `metadata`, and `message` sent on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenWatch {
    /// The cluster (`fleet.watch_cluster`).
    pub cluster: String,
    /// The stream's initial metadata: `hasleader` (a member without a leader ends the watch
    /// rather than going silent) and, with authentication, etcd's `token`.
    pub metadata: Vec<(&'static str, String)>,
    /// The watch's create request.
    pub message: Vec<u8>,
}

/// What this balancer asks of etcd, as a value the host carries out
/// ([`crate::host::carry_out`]), which hands back what came of it through the pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToEtcd {
    /// A call to etcd's JSON gateway at `fleet.cluster`.
    Call(Request),
    /// The watch to open on `fleet.watch_cluster`.
    Watch(OpenWatch),
    /// A gRPC stream to cancel: the watch of a part in the fleet that ended, or one that is
    /// not (any more) the watch's.
    Cancel(u32),
}

impl Membership {
    /// A balancer that has not spoken to etcd yet, as of `now`: nothing is probed here until the
    /// first read says what is free, or one lease TTL passes without one.
    pub fn new(settings: Settings, now: Time) -> Membership {
        Membership {
            started: now,
            joined: Joined::Out,
            auth: None,
            registered: false,
            on_wire: Vec::new(),
            tried: None,
            read: None,
            asked: None,
            failed_reads: 0,
            balancers: 0,
            duties: Vec::new(),
            results: Vec::new(),
            published: Vec::new(),
            local: false,
            why: "no answer from etcd yet".into(),
            refused: Vec::new(),
            notes: Vec::new(),
            evidence: evidence::Evidence::default(),
            traffic: traffic::PeerCounts::default(),
            ejections: ejections::Ejections::default(),
            follow: settings.watch_cluster.clone().map(|cluster| {
                watch::Follow::new(cluster, format!("{}/v{VERSION}/", settings.prefix))
            }),
            settings,
        }
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    fn ttl(&self) -> Duration {
        self.settings.lease_ttl
    }

    fn timeout(&self) -> Duration {
        (self.ttl() / 3).min(Duration::from_secs(2))
    }

    fn key(&self, kind: &str, name: &str) -> String {
        format!("{}/v{VERSION}/{kind}/{name}", self.settings.prefix)
    }

    /// This balancer's etcd lease ID, once it has one.
    pub fn lease(&self) -> Option<i64> {
        match self.joined {
            Joined::In { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// This balancer's name in the fleet: its lease ID in hex, once it has one.
    pub fn me(&self) -> Option<String> {
        self.lease().map(|l| format!("{l:x}"))
    }

    /// Whether this balancer has fallen back to probing every backend itself.
    pub fn local(&self) -> bool {
        self.local
    }

    /// When the prefix was last read.
    pub fn last_read(&self) -> Option<Time> {
        self.read
    }

    /// How many balancers the last read counted.
    pub fn balancers(&self) -> usize {
        self.balancers
    }

    /// What to log since the last look.
    pub fn take_notes(&mut self) -> Vec<Note> {
        std::mem::take(&mut self.notes)
    }

    /// Whether `token` is one of this fleet's calls (not a probe's).
    pub fn owns(&self, token: u32) -> bool {
        self.on_wire.iter().any(|(t, _)| *t == token)
    }

    fn note(&mut self, level: Level, text: String) {
        self.notes.push(Note { level, text });
    }

    fn busy(&self, wanted: impl Fn(&Call) -> bool) -> bool {
        self.on_wire.iter().any(|(_, call)| wanted(call))
    }

    /// Falls back to local, or rejoins, as the time since the last usable read says.
    fn judge(&mut self, now: Time) {
        let since = self.read.unwrap_or(self.started);
        let local = now.saturating_sub(since) > self.ttl();
        if local == self.local {
            return;
        }
        self.local = local;
        if local {
            let text = format!(
                "fleet: no usable answer from etcd for {}s ({}); every backend is probed here until it answers",
                self.ttl().as_secs(),
                self.why
            );
            self.note(Level::Warn, text);
        } else {
            let text = format!(
                "fleet: etcd answers again; probe duties are shared with {} balancer{}",
                self.balancers,
                if self.balancers == 1 { "" } else { "s" }
            );
            self.note(Level::Info, text);
        }
    }

    fn request(&self, call: Call, path: &'static str, body: String) -> Request {
        Request {
            call,
            path,
            body,
            token: self.auth.clone(),
            timeout: self.timeout(),
        }
    }

    /// Time passing, with the probe state of the backends this balancer's pool probes (by key):
    /// the calls to make now.
    pub fn tick(&mut self, now: Time, own: &[(String, ActiveHealth)]) -> Vec<Request> {
        // A watch in place holds every change as etcd commits it, and ends when its member goes
        // or loses its leader: while it stands, the view is current.
        if self.follow.as_ref().is_some_and(watch::Follow::live) {
            self.read = Some(now);
        }
        self.judge(now);
        let mut out = Vec::new();
        let retry = self.ttl() / 3;
        let due =
            |at: Option<Time>, every: Duration| at.is_none_or(|t| now.saturating_sub(t) >= every);
        if let Some((user, password)) = self.settings.credentials() {
            if self.auth.is_none() {
                if !self.busy(|c| matches!(c, Call::Authenticate)) && due(self.tried, retry) {
                    self.tried = Some(now);
                    let body = gateway::authenticate(user, password);
                    out.push(self.request(Call::Authenticate, "/v3/auth/authenticate", body));
                }
                return out;
            }
        }
        match self.joined {
            Joined::Out => {
                if due(self.tried, retry) {
                    self.tried = Some(now);
                    self.joined = Joined::Joining;
                    let body = gateway::grant(self.ttl().as_secs());
                    out.push(self.request(Call::Grant, "/v3/lease/grant", body));
                }
            }
            Joined::Joining => {}
            Joined::In { lease, kept } => {
                if now.saturating_sub(kept) >= retry && !self.busy(|c| matches!(c, Call::KeepAlive))
                {
                    out.push(self.request(
                        Call::KeepAlive,
                        "/v3/lease/keepalive",
                        gateway::keepalive(lease),
                    ));
                }
                if !self.registered && !self.busy(|c| matches!(c, Call::Register)) {
                    let key = self.key("balancers", &format!("{lease:x}"));
                    let body = gateway::put(&key, lease.to_string().as_bytes(), lease);
                    out.push(self.request(Call::Register, "/v3/kv/put", body));
                }
            }
        }
        let every = if self.failed_reads == 1 {
            READ_AGAIN
        } else {
            READ_EVERY
        };
        if self.follow.as_ref().is_some_and(|f| !f.unread.is_empty()) {
            self.take_in_kept(now);
        }
        // With a watch, the prefix is read only before it opens: first, after a compaction, and
        // while the proxy will not open one.
        let reading = self.follow.as_ref().is_none_or(|f| {
            f.revision == 0 || f.stale || (f.refused.is_some() && f.stream == watch::Stream::Closed)
        });
        if reading && due(self.asked, every) && !self.busy(|c| matches!(c, Call::Read)) {
            self.asked = Some(now);
            let prefix = format!("{}/", self.settings.prefix);
            out.push(self.request(Call::Read, "/v3/kv/range", gateway::range(&prefix)));
        }
        if let (Some(lease), true, false) = (self.lease(), self.registered, self.local) {
            if self.read.is_some_and(|r| r >= self.started) {
                self.share(lease, own, &mut out);
            }
        }
        out
    }

    /// Claims, gives back and publishes, from the last read.
    fn share(&mut self, lease: i64, own: &[(String, ActiveHealth)], out: &mut Vec<Request>) {
        let holder = |key: &str| self.duties.iter().find(|(k, _)| k == key).map(|(_, h)| *h);
        let held: Vec<&String> = own
            .iter()
            .map(|(k, _)| k)
            .filter(|k| holder(k) == Some(lease))
            .collect();
        let claiming = self
            .on_wire
            .iter()
            .filter(|(_, c)| matches!(c, Call::Claim(_)))
            .count();
        let share = own.len().div_ceil(self.balancers.max(1));
        let free: Vec<&String> = own
            .iter()
            .map(|(k, _)| k)
            .filter(|k| holder(k).is_none())
            .filter(|k| !self.busy(|c| matches!(c, Call::Claim(c) if c == *k)))
            .collect();
        let mut wanted = share.saturating_sub(held.len() + claiming);
        if !free.is_empty() && wanted > 0 {
            // Start at a place of this balancer's own, so balancers claiming at once mostly
            // want different duties.
            let start = usize::try_from(lease.unsigned_abs() % free.len() as u64).unwrap_or(0);
            let mut claims = Vec::new();
            for key in free.iter().cycle().skip(start).take(free.len()) {
                if wanted == 0 {
                    break;
                }
                wanted -= 1;
                claims.push((*key).clone());
            }
            for key in claims {
                let body =
                    gateway::create(&self.key("duty", &key), lease.to_string().as_bytes(), lease);
                out.push(self.request(Call::Claim(key), "/v3/kv/txn", body));
            }
        }
        if held.len() > share && !self.busy(|c| matches!(c, Call::Release(_))) {
            if let Some(key) = held.last() {
                let key = (*key).clone();
                let body =
                    gateway::delete_if(&self.key("duty", &key), lease.to_string().as_bytes());
                out.push(self.request(Call::Release(key), "/v3/kv/txn", body));
            }
        }
        let publish: Vec<(String, ActiveHealth)> = own
            .iter()
            .filter(|(k, _)| held.contains(&k))
            .filter(|(k, h)| !self.published.iter().any(|(p, ph)| p == k && ph == h))
            .filter(|(k, _)| !self.busy(|c| matches!(c, Call::Publish(p, _) if p == k)))
            .cloned()
            .collect();
        for (key, health) in publish {
            let bytes = tagged(Published::TAG, &Published { by: lease, health });
            let body = gateway::put(&self.key("active", &key), &bytes, lease);
            out.push(self.request(Call::Publish(key, health), "/v3/kv/put", body));
        }
    }

    /// The watch to open now, if one is due: the prefix has been read, no stream is open or
    /// opening, and the proxy did not refuse one within [`watch::REOPEN_AFTER`].
    pub fn watch_due(&mut self, now: Time) -> Option<OpenWatch> {
        let token = self.auth.clone();
        let wants_token = self.settings.credentials().is_some();
        let prefix = format!("{}/", self.settings.prefix);
        let follow = self.follow.as_mut()?;
        let refused_lately = follow
            .refused
            .as_ref()
            .is_some_and(|(at, _)| now.saturating_sub(*at) < watch::REOPEN_AFTER);
        if follow.stream != watch::Stream::Closed
            || follow.revision == 0
            || follow.stale
            || refused_lately
            || (wants_token && token.is_none())
        {
            return None;
        }
        follow.stream = watch::Stream::Opening;
        let mut metadata = vec![("hasleader", "true".to_owned())];
        metadata.extend(token.map(|t| ("token", t)));
        Some(OpenWatch {
            cluster: follow.cluster.clone(),
            metadata,
            message: watch::request(&prefix, follow.revision + 1),
        })
    }

    /// The watch asked for is open as `token`: a refusal before it is over (and the next one
    /// is said again).
    pub fn watch_opened(&mut self, token: u32, now: Time) {
        if let Some(follow) = self.follow.as_mut() {
            follow.stream = watch::Stream::Open {
                token,
                since: now,
                created: false,
            };
            follow.refused = None;
        }
    }

    /// The proxy would not open the watch, saying `why`: the prefix is read on the clock until
    /// it is tried again.
    pub fn watch_refused(&mut self, why: &str, now: Time) {
        let Some(follow) = self.follow.as_mut() else {
            return;
        };
        follow.stream = watch::Stream::Closed;
        let first = follow.refused.is_none();
        follow.refused = Some((now, why.to_owned()));
        if first {
            let text = format!(
                "fleet: etcd's watch could not be opened through cluster {} ({why}); the prefix is read every {} ms instead",
                follow.cluster,
                READ_EVERY.as_millis()
            );
            self.note(Level::Warn, text);
        }
    }

    /// A stream opened that etcd has not confirmed within a call's timeout: the token to cancel
    /// (it is opened again at the next tick).
    pub fn watch_stalled(&mut self, now: Time) -> Option<u32> {
        let timeout = self.timeout();
        let follow = self.follow.as_mut()?;
        match follow.stream {
            watch::Stream::Open {
                token,
                since,
                created: false,
            } if now.saturating_sub(since) > timeout => {
                follow.stream = watch::Stream::Closed;
                Some(token)
            }
            _ => None,
        }
    }

    /// Whether `token` is the watch's stream.
    pub fn owns_watch(&self, token: u32) -> bool {
        self.follow.as_ref().is_some_and(|f| f.owns(token))
    }

    /// The watch's stream, if one is open: the adapter closes it when this membership goes.
    pub fn watch_token(&self) -> Option<u32> {
        match self.follow.as_ref()?.stream {
            watch::Stream::Open { token, .. } => Some(token),
            _ => None,
        }
    }

    /// The watch's figures, for the status page and the metrics: none without a watch.
    pub fn watch(&self) -> Option<&watch::Follow> {
        self.follow.as_ref()
    }

    /// A message on the watch's stream `token`: whether the stream stays, and whether the view
    /// changed ([`Watched`]).
    pub fn watch_message(&mut self, token: u32, message: &[u8], now: Time) -> Watched {
        let prefix = self.settings.prefix.clone();
        let ended = Watched {
            keep: false,
            view_changed: false,
        };
        let Some(follow) = self.follow.as_mut().filter(|f| f.owns(token)) else {
            return ended;
        };
        match watch::heard(message) {
            Ok(watch::Heard::Created) => {
                if let watch::Stream::Open { token, since, .. } = follow.stream {
                    follow.stream = watch::Stream::Open {
                        token,
                        since,
                        created: true,
                    };
                }
                let text = format!(
                    "fleet: following {prefix}/ in etcd from revision {}",
                    follow.revision + 1
                );
                self.read = Some(now);
                self.note(Level::Info, text);
                self.judge(now);
                Watched {
                    keep: true,
                    view_changed: true,
                }
            }
            Ok(watch::Heard::Changes { revision, changes }) => {
                let changed = follow.apply(changes, revision, now);
                let urgent = !changed.within(watch::Kinds::TRAFFIC);
                if urgent {
                    self.take_in_kept(now);
                }
                self.read = Some(now);
                self.failed_reads = 0;
                self.judge(now);
                Watched {
                    keep: true,
                    view_changed: urgent,
                }
            }
            Ok(watch::Heard::Canceled { compacted, reason }) => {
                follow.stream = watch::Stream::Closed;
                let text = match compacted {
                    Some(at) => {
                        follow.stale = true;
                        format!(
                            "fleet: etcd compacted past revision {} (to {at}); reading the prefix again",
                            follow.revision
                        )
                    }
                    None => format!("fleet: etcd ended the watch ({reason}); resuming it"),
                };
                self.note(Level::Info, text);
                ended
            }
            Err(why) => {
                follow.stream = watch::Stream::Closed;
                follow.stale = true;
                self.note(
                    Level::Warn,
                    format!("fleet: ignored the watch: {why}; reading the prefix again"),
                );
                ended
            }
        }
    }

    /// The watch's stream `token` ended with gRPC status `status`: it is opened again from the
    /// revision after the last one heard.
    pub fn watch_closed(&mut self, token: u32, status: u32) {
        let Some(follow) = self.follow.as_mut().filter(|f| f.owns(token)) else {
            return;
        };
        let live = follow.live();
        follow.stream = watch::Stream::Closed;
        if live {
            let text = format!(
                "fleet: etcd's watch ended (gRPC status {status}); resuming from revision {}",
                follow.revision + 1
            );
            self.note(Level::Info, text);
        }
    }

    /// `call` is on the wire as `token`.
    pub fn sent(&mut self, call: Call, token: u32) {
        self.on_wire.push((token, call));
    }

    /// The proxy refused to send `call`, saying `why`.
    pub fn refused(&mut self, call: Call, why: &str, now: Time) {
        self.settle(
            call,
            Err(format!("the proxy refused the call ({why})")),
            now,
        );
    }

    /// The answer to `token` (status `None` if the call was reset or timed out): true if it was
    /// this fleet's.
    pub fn answered(&mut self, token: u32, status: Option<u16>, body: &[u8], now: Time) -> bool {
        let Some(at) = self.on_wire.iter().position(|(t, _)| *t == token) else {
            return false;
        };
        let (_, call) = self.on_wire.swap_remove(at);
        self.settle(call, Ok((status, body)), now);
        true
    }

    fn failed(&mut self, why: String) {
        if self.settings.credentials().is_some() && why.contains("token") {
            self.auth = None; // expired or revoked: authenticate again
        }
        self.why = why;
    }

    /// What came of `call`: its answer (status and body), or why it never went out.
    fn settle(&mut self, call: Call, answer: Result<(Option<u16>, &[u8]), String>, now: Time) {
        let (status, body) = match &answer {
            Ok((status, body)) => (*status, *body),
            Err(_) => (None, &[][..]),
        };
        let fail = |why: String| match &answer {
            Err(refused) => refused.clone(),
            Ok(_) => why,
        };
        match call {
            Call::Authenticate => match gateway::token(status, body) {
                Ok(token) => {
                    self.auth = Some(token);
                    self.tried = None;
                }
                Err(why) => self.failed(fail(why)),
            },
            Call::Grant => match gateway::granted(status, body) {
                Ok(lease) => {
                    self.joined = Joined::In { lease, kept: now };
                    self.registered = false;
                    self.published.clear();
                    self.evidence.told.clear();
                    self.traffic.told = None;
                }
                Err(why) => {
                    self.joined = Joined::Out;
                    self.failed(fail(why));
                }
            },
            Call::KeepAlive => match gateway::kept(status, body) {
                Ok(true) => {
                    if let Joined::In { lease, .. } = self.joined {
                        self.joined = Joined::In { lease, kept: now };
                    }
                }
                Ok(false) => {
                    let me = self.me().unwrap_or_default();
                    self.note(
                        Level::Warn,
                        format!("fleet: lease {me} expired in etcd; its probe duties are free, and a new lease is asked for"),
                    );
                    self.joined = Joined::Out;
                    self.registered = false;
                    self.tried = None;
                }
                Err(why) => self.failed(fail(why)),
            },
            Call::Register => match gateway::put_taken(status, body) {
                Ok(()) => self.registered = true,
                Err(why) => self.failed(fail(why)),
            },
            Call::Read => match gateway::kvs(status, body) {
                Ok(range) => {
                    match self.follow.as_mut() {
                        Some(follow) => {
                            follow.read(range.kvs, range.revision);
                            self.take_in_kept(now);
                        }
                        None => self.take_in(&range.kvs, watch::Kinds::ALL, now),
                    }
                    self.read = Some(now);
                    self.failed_reads = 0;
                    self.judge(now);
                }
                Err(why) => {
                    self.failed_reads = self.failed_reads.saturating_add(1);
                    self.failed(fail(why));
                }
            },
            Call::Claim(key) => match (gateway::succeeded(status, body), self.lease()) {
                (Ok(true), Some(lease)) => self.set_duty(key, lease),
                (Ok(_), _) => {}
                (Err(why), _) => self.failed(fail(why)),
            },
            Call::Release(key) => match gateway::succeeded(status, body) {
                Ok(_) => self.duties.retain(|(k, _)| *k != key),
                Err(why) => self.failed(fail(why)),
            },
            Call::Publish(key, health) => match gateway::put_taken(status, body) {
                Ok(()) => {
                    self.published.retain(|(k, _)| *k != key);
                    self.published.push((key, health));
                }
                Err(why) => self.failed(fail(why)),
            },
            Call::Evidence(key, value) => match gateway::put_taken(status, body) {
                Ok(()) => self.told(key, value),
                Err(why) => self.failed(fail(why)),
            },
            Call::Traffic(counts) => match gateway::put_taken(status, body) {
                Ok(()) => self.traffic.told = Some((now, counts)),
                Err(why) => self.failed(fail(why)),
            },
            Call::GrantEjection(key, standing) => match gateway::granted(status, body) {
                Ok(lease) => self.ejection_granted(key, standing, Some(lease)),
                Err(why) => {
                    self.ejection_granted(key, standing, None);
                    self.failed(fail(why));
                }
            },
            Call::Eject(key, until) => match gateway::put_taken(status, body) {
                Ok(()) => self.ejection_told(key, until, None),
                Err(why) => {
                    let why = fail(why);
                    self.ejection_told(key, until, Some(&why));
                    self.failed(why);
                }
            },
        }
    }

    fn set_duty(&mut self, key: String, lease: i64) {
        self.duties.retain(|(k, _)| *k != key);
        self.duties.push((key, lease));
    }

    /// Refuses the value at `key`, logging it once.
    fn refuse(&mut self, key: &str, why: &str) {
        if self.refused.iter().any(|k| k == key) {
            return;
        }
        if self.refused.len() < MAX_REFUSED {
            self.refused.push(key.to_owned());
        }
        self.note(
            Level::Warn,
            format!("fleet: ignored the value at {key:?}: {why}"),
        );
    }

    /// The keys the watch keeps, taken in as a read, for the kinds that changed.
    fn take_in_kept(&mut self, now: Time) {
        let Some((kept, changed)) = self.follow.as_mut().map(watch::Follow::take_kept) else {
            return;
        };
        self.take_in(&kept, changed, now);
        if let Some(follow) = self.follow.as_mut() {
            follow.restore(kept);
        }
    }

    /// A read of the prefix, of which the keys of the kinds `wanted` are taken in; the others
    /// stand as last taken in. Who is in the fleet is always counted again, and request counts
    /// are read again with it, since they count only from balancers of the fleet.
    fn take_in(&mut self, kvs: &[gateway::KeyValue], wanted: watch::Kinds, now: Time) {
        use watch::Kinds;
        let wanted = match wanted.has(Kinds::BALANCERS) {
            true => wanted.with(Kinds::TRAFFIC),
            false => wanted,
        };
        let mine = format!("{}/v{VERSION}/", self.settings.prefix);
        let base = format!("{}/", self.settings.prefix);
        let lease_of = |kv: &gateway::KeyValue| {
            let value = std::str::from_utf8(&kv.value).ok()?.parse::<i64>().ok();
            (value == Some(kv.lease) && kv.lease != 0).then_some(kv.lease)
        };
        let balancers = format!("{mine}balancers/");
        let members: Vec<i64> = kvs
            .iter()
            .filter(|kv| kv.key.starts_with(&balancers))
            .filter_map(lease_of)
            .collect();
        let mut duties = Vec::new();
        let mut results = Vec::new();
        let mut failures = Vec::new();
        let mut counts = Vec::new();
        let mut ejected = Vec::new();
        let latest = now.saturating_add(self.ttl());
        for kv in kvs {
            if !wanted.has(Kinds::of(&kv.key, &mine)) {
                continue;
            }
            let Some(rest) = kv.key.strip_prefix(&mine) else {
                if kv.key.starts_with(&base) {
                    self.refuse(&kv.key, "not a key of this version of upcheck");
                }
                continue;
            };
            let (kind, name) = rest.split_once('/').unwrap_or((rest, ""));
            let holder = lease_of(kv);
            match kind {
                "balancers" if holder.is_some() => {}
                "duty" if holder.is_some() && !name.is_empty() => {
                    duties.push((name.to_owned(), kv.lease));
                }
                "active" => match self.published_state(kv, now) {
                    Ok(health) => results.push((name.to_owned(), kv.lease, health)),
                    Err(why) => {
                        self.refuse(&kv.key, &why);
                        continue;
                    }
                },
                "failures" => match evidence::read(kv, name, latest) {
                    Ok(published) => failures.push(published),
                    Err(why) => {
                        self.refuse(&kv.key, why);
                        continue;
                    }
                },
                "traffic" => match traffic::read(kv, name, latest, self.traffic.window) {
                    Ok(_) if !members.contains(&kv.lease) => {
                        self.refuse(&kv.key, "counts of no balancer of the fleet");
                        continue;
                    }
                    Ok(read) => counts.push((kv.lease, read)),
                    Err(why) => {
                        self.refuse(&kv.key, why);
                        continue;
                    }
                },
                "ejected" => match ejections::read(kv, now, latest, self.ejections.longest) {
                    Ok(Some(shared)) => ejected.push((name.to_owned(), shared)),
                    Ok(None) => {}
                    Err(why) => {
                        self.refuse(&kv.key, &why);
                        continue;
                    }
                },
                "balancers" | "duty" => {
                    self.refuse(&kv.key, "its value is not the lease it lives by");
                    continue;
                }
                // The operators' membership and its followers' reports (`upcheck backends`):
                // the balancers' evidence is none of it.
                "membership" | "applied" => {}
                _ => {
                    self.refuse(&kv.key, "not a key upcheck writes");
                    continue;
                }
            }
            self.refused.retain(|k| *k != kv.key);
        }
        self.balancers = members.len();
        if wanted.has(Kinds::DUTY) {
            self.duties = duties;
        }
        if wanted.has(Kinds::ACTIVE) {
            self.results = results;
        }
        if wanted.has(Kinds::FAILURES) {
            self.evidence.read = failures;
        }
        if wanted.has(Kinds::TRAFFIC) {
            self.traffic.read = traffic::others(counts, self.lease());
        }
        if wanted.has(Kinds::EJECTED) {
            self.ejections_read(ejected, now);
        }
    }

    fn published_state(&self, kv: &gateway::KeyValue, now: Time) -> Result<ActiveHealth, String> {
        let value: Published =
            untagged(Published::TAG, &kv.value).map_err(|e| format!("a probe state {e}"))?;
        if value.by != kv.lease || kv.lease == 0 {
            return Err("published by another than the lease it lives by".into());
        }
        let ahead = now.saturating_add(self.ttl());
        let times = [
            value.health.last.map(|(t, _)| t),
            Some(value.health.since),
            value.health.contradicted,
            value.health.warm_up,
        ];
        if times.into_iter().flatten().any(|t| t > ahead) {
            return Err("its times are in the future".into());
        }
        Ok(value.health)
    }

    /// Where the duty of the backend whose key is `key` is.
    pub fn duty(&self, key: &str) -> Duty {
        if self.local {
            return Duty::Here;
        }
        let holder = self.duties.iter().find(|(k, _)| k == key).map(|(_, h)| *h);
        if holder.is_some() && holder == self.lease() {
            return Duty::Here;
        }
        let health = holder.and_then(|holder| {
            self.results
                .iter()
                .find(|(k, by, _)| k == key && *by == holder)
                .map(|(_, _, h)| *h)
        });
        Duty::Elsewhere { holder, health }
    }
}

#[cfg(test)]
pub(crate) mod tests;
