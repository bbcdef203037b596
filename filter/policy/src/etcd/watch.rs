//! Following the prefix with etcd's Watch: one gRPC stream per balancer (`etcdserverpb.Watch/
//! Watch`), every committed change under the prefix pushed in revision order, so that what one
//! balancer publishes is held by every other a stream event later, and etcd's load grows with
//! what changes, not with the clock or the square of the fleet.
//!
//! The prefix is read once ([`super::gateway::range`]); the watch starts at the revision after
//! that read, so nothing falls between them. The keys are kept here as of the last revision
//! heard ([`Follow`]), each change applied in order, and what is kept is taken in as a read is
//! ([`super::FleetPart::take_in`]), through the same checks: an event is as untrusted as a
//! read. A stream that ends is opened again from the revision after the last one heard, so no
//! change is missed and nothing is read again; only a watch etcd cancels because its start was
//! compacted away (or a message that does not decode) takes a fresh read. There is no periodic
//! read while the stream is open: etcd's `hasleader` metadata makes a member that loses its
//! leader end the watch rather than go silent, and the stream's order makes a resync
//! unnecessary.
//!
//! The messages are protocol buffers, encoded and decoded by prost's derived code from the few
//! fields of etcd's `rpc.proto` and `kv.proto` that upcheck reads (others are skipped): no protoc
//! and no build script, and the decoder the ecosystem checks against hostile input, for what it
//! costs in the module's size (docs/build-profile.md).

use super::gateway::KeyValue;
use super::keys::{self, prefix_end, Layout};
use crate::time::Time;
use prost::Message;

/// etcd's gRPC service and method for a watch.
pub const SERVICE: &str = "etcdserverpb.Watch";
/// See [`SERVICE`].
pub const METHOD: &str = "Watch";

/// The most keys kept of the prefix: a fleet of a thousand balancers and backends stays well
/// inside it, and a writer that floods the prefix cannot grow the prober's memory past it.
pub const MAX_KEYS: usize = 100_000;

/// How long after a stream could not be opened (the proxy refused it: no such cluster, or a
/// host without gRPC streams) it is tried again; meanwhile the prefix is read on the clock, as
/// without a watch.
pub const REOPEN_AFTER: std::time::Duration = std::time::Duration::from_secs(30);

/// `etcdserverpb.WatchRequest`, as upcheck asks: a create request.
#[derive(Clone, PartialEq, Message)]
struct WatchRequest {
    #[prost(message, optional, tag = "1")]
    create_request: Option<WatchCreateRequest>,
}

/// `etcdserverpb.WatchCreateRequest`: the prefix's keys, from a revision.
#[derive(Clone, PartialEq, Message)]
struct WatchCreateRequest {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(bytes = "vec", tag = "2")]
    range_end: Vec<u8>,
    #[prost(int64, tag = "3")]
    start_revision: i64,
}

/// `etcdserverpb.WatchResponse`, the fields upcheck reads.
#[derive(Clone, PartialEq, Message)]
struct WatchResponse {
    #[prost(message, optional, tag = "1")]
    header: Option<ResponseHeader>,
    #[prost(bool, tag = "3")]
    created: bool,
    #[prost(bool, tag = "4")]
    canceled: bool,
    #[prost(int64, tag = "5")]
    compact_revision: i64,
    #[prost(string, tag = "6")]
    cancel_reason: String,
    #[prost(message, repeated, tag = "11")]
    events: Vec<WatchEvent>,
}

/// `etcdserverpb.ResponseHeader`: the store's revision.
#[derive(Clone, PartialEq, Message)]
struct ResponseHeader {
    #[prost(int64, tag = "3")]
    revision: i64,
}

/// `mvccpb.Event`: a put (0) or a delete (1) of a key.
#[derive(Clone, PartialEq, Message)]
struct WatchEvent {
    #[prost(int32, tag = "1")]
    kind: i32,
    #[prost(message, optional, tag = "2")]
    kv: Option<StoredKey>,
}

/// `mvccpb.KeyValue`, the fields upcheck reads.
#[derive(Clone, PartialEq, Message)]
struct StoredKey {
    #[prost(bytes = "vec", tag = "1")]
    key: Vec<u8>,
    #[prost(int64, tag = "3")]
    mod_revision: i64,
    #[prost(bytes = "vec", tag = "5")]
    value: Vec<u8>,
    #[prost(int64, tag = "6")]
    lease: i64,
}

/// The request that opens a watch of `prefix`'s keys from revision `from`.
pub fn request(prefix: &str, from: i64) -> Vec<u8> {
    WatchRequest {
        create_request: Some(WatchCreateRequest {
            key: prefix.as_bytes().to_vec(),
            range_end: prefix_end(prefix.as_bytes()),
            start_revision: from,
        }),
    }
    .encode_to_vec()
}

/// One change to a key, in the order etcd committed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyChange {
    /// The key holds this value now.
    Put(KeyValue),
    /// The key is gone (deleted, or its lease expired).
    Delete(String),
}

impl KeyChange {
    /// The key it changes.
    pub fn key(&self) -> &str {
        match self {
            KeyChange::Put(kv) => &kv.key,
            KeyChange::Delete(key) => key,
        }
    }
}

/// What one message of the stream says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// The watch is in place.
    Created,
    /// Changes, in order, and the store's revision after them.
    Changes {
        /// The store's revision the message is as of.
        revision: i64,
        /// The changes (none for a progress report).
        changes: Vec<KeyChange>,
    },
    /// etcd ended the watch: its start was compacted away (`compacted`, a fresh read is needed),
    /// or for `reason`.
    Canceled {
        /// The compaction's revision, if that is why.
        compacted: Option<i64>,
        /// What etcd said.
        reason: String,
    },
}

/// Reads one message of the stream; why not, for one that does not decode or says what etcd
/// never says. A key that is not UTF-8 is none of upcheck's and is left out.
pub fn heard(message: &[u8]) -> Result<Heard, String> {
    let response = WatchResponse::decode(message)
        .map_err(|e| format!("a watch message that does not decode ({e})"))?;
    if response.canceled {
        return Ok(Heard::Canceled {
            compacted: (response.compact_revision > 0).then_some(response.compact_revision),
            reason: response.cancel_reason.chars().take(120).collect(),
        });
    }
    if response.created {
        return Ok(Heard::Created);
    }
    let revision = response
        .header
        .map(|h| h.revision)
        .filter(|r| *r > 0)
        .ok_or("a watch message without the store's revision")?;
    let mut changes = Vec::with_capacity(response.events.len());
    for event in response.events {
        let stored = event.kv.ok_or("a watch event without its key")?;
        if stored.mod_revision > revision {
            return Err("a watch event newer than its message".into());
        }
        let Ok(key) = String::from_utf8(stored.key) else {
            continue;
        };
        changes.push(match event.kind {
            0 => KeyChange::Put(KeyValue {
                key,
                value: stored.value,
                lease: stored.lease,
            }),
            1 => KeyChange::Delete(key),
            _ => return Err("a watch event neither a put nor a delete".into()),
        });
    }
    Ok(Heard::Changes { revision, changes })
}

/// Kinds of keys under the prefix, as a set: which a take-in reads again. After a read every
/// kind is; after a message on the stream only those it changed, so that a probe result heard
/// does not decode every balancer's request counts again.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Kinds(u8);

impl Kinds {
    /// Every kind: a read of the whole prefix.
    pub const ALL: Kinds = Kinds(u8::MAX);
    /// `balancers/`: who is in the fleet.
    pub const BALANCERS: Kinds = Kinds(1);
    /// `duty/`: who probes which backend.
    pub const DUTY: Kinds = Kinds(1 << 1);
    /// `active/`: the probe results published.
    pub const ACTIVE: Kinds = Kinds(1 << 2);
    /// `failures/`: the failures toward `max_fails` published.
    pub const FAILURES: Kinds = Kinds(1 << 3);
    /// `traffic/`: the request counts published, which can wait for the tick.
    pub const TRAFFIC: Kinds = Kinds(1 << 4);
    /// `ejected/`: the outlier ejections published.
    pub const EJECTED: Kinds = Kinds(1 << 5);
    /// Any other key: the operators' membership, or one upcheck does not write.
    pub const OTHER: Kinds = Kinds(1 << 6);

    /// The kind of `key`, a key of the fleet whose keys are `layout`.
    pub fn of(key: &str, layout: &Layout) -> Kinds {
        match layout.split(key).map(|(kind, _)| kind) {
            Some(keys::BALANCERS) => Kinds::BALANCERS,
            Some(keys::DUTY) => Kinds::DUTY,
            Some(keys::ACTIVE) => Kinds::ACTIVE,
            Some(keys::FAILURES) => Kinds::FAILURES,
            Some(keys::TRAFFIC) => Kinds::TRAFFIC,
            Some(keys::EJECTED) => Kinds::EJECTED,
            _ => Kinds::OTHER,
        }
    }

    /// Whether it holds every kind `other` holds.
    pub fn has(self, other: Kinds) -> bool {
        self.0 & other.0 == other.0
    }

    /// The kinds of both.
    pub fn with(self, other: Kinds) -> Kinds {
        Kinds(self.0 | other.0)
    }

    /// Whether it holds no kind but those `other` holds.
    pub fn within(self, other: Kinds) -> bool {
        self.0 & !other.0 == 0
    }

    /// Whether it holds no kind.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Where the stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    /// None open: one opens once the prefix has been read.
    Closed,
    /// Asked of the proxy, not yet handed back.
    Opening,
    /// Open as `token` since then; `created` once etcd said the watch is in place.
    Open {
        /// The proxy's token for it.
        token: u32,
        /// When it opened.
        since: Time,
        /// Whether etcd said the watch is in place.
        created: bool,
    },
}

/// The prefix as the watch keeps it, and the stream's state and figures.
#[derive(Debug, Clone)]
pub struct Follow {
    /// The cluster the stream goes to (`fleet.watch_cluster`).
    pub cluster: String,
    /// Where the stream is.
    pub stream: Stream,
    /// The prefix's keys, sorted, as of `revision`.
    kept: Vec<KeyValue>,
    /// The store's revision `kept` is as of (0 before the first read).
    pub revision: i64,
    /// The fleet's keys, for their kinds.
    keys: Layout,
    /// The kinds of keys changed in `kept` since it was last taken in.
    pub(super) unread: Kinds,
    /// Whether a fresh read must come before the next stream (a compaction, or garbage).
    pub(super) stale: bool,
    /// When the proxy last refused to open a stream, and why.
    pub(super) refused: Option<(Time, String)>,
    /// Changes taken in from the stream.
    pub events: u64,
    /// Fresh reads after the first (a compaction, or a message that did not decode).
    pub resyncs: u64,
    /// When the last change arrived.
    pub last_event: Option<Time>,
}

impl Follow {
    /// A watch through `cluster` of the fleet whose keys are `keys` that has read nothing yet.
    pub fn new(cluster: String, keys: Layout) -> Follow {
        Follow {
            cluster,
            stream: Stream::Closed,
            kept: Vec::new(),
            revision: 0,
            keys,
            unread: Kinds::default(),
            stale: false,
            refused: None,
            events: 0,
            resyncs: 0,
            last_event: None,
        }
    }

    /// Whether the stream is open and the watch in place: the keys kept are as current as etcd.
    pub fn live(&self) -> bool {
        matches!(self.stream, Stream::Open { created: true, .. })
    }

    /// Whether `token` is the stream's.
    pub fn owns(&self, token: u32) -> bool {
        matches!(self.stream, Stream::Open { token: t, .. } if t == token)
    }

    /// The keys kept and the kinds changed since the last take-in, for a take-in; the keys are
    /// put back with [`Follow::restore`].
    pub(super) fn take_kept(&mut self) -> (Vec<KeyValue>, Kinds) {
        let unread = std::mem::take(&mut self.unread);
        (std::mem::take(&mut self.kept), unread)
    }

    /// The keys kept, back after a take-in.
    pub(super) fn restore(&mut self, kept: Vec<KeyValue>) {
        self.kept = kept;
    }

    /// A read of the whole prefix as of `revision`: what is kept from now on.
    pub(super) fn read(&mut self, mut kvs: Vec<KeyValue>, revision: i64) {
        if self.revision > 0 && self.stale {
            self.resyncs += 1;
        }
        kvs.sort_by(|a, b| a.key.cmp(&b.key));
        kvs.truncate(MAX_KEYS);
        self.kept = kvs;
        self.revision = revision;
        self.stale = false;
        self.unread = Kinds::ALL;
    }

    /// Applies `changes` up to `revision`: the kinds of keys they changed.
    pub(super) fn apply(&mut self, changes: Vec<KeyChange>, revision: i64, now: Time) -> Kinds {
        let mut changed = Kinds::default();
        for change in changes {
            changed = changed.with(Kinds::of(change.key(), &self.keys));
            self.events += 1;
            self.last_event = Some(now);
            let at = self
                .kept
                .binary_search_by(|kv| kv.key.as_str().cmp(change.key()));
            match (change, at) {
                (KeyChange::Put(kv), Ok(i)) => {
                    if let Some(slot) = self.kept.get_mut(i) {
                        *slot = kv;
                    }
                }
                (KeyChange::Put(kv), Err(i)) if self.kept.len() < MAX_KEYS => {
                    self.kept.insert(i, kv)
                }
                (KeyChange::Put(_), Err(_)) => {}
                (KeyChange::Delete(_), Ok(i)) => {
                    self.kept.remove(i);
                }
                (KeyChange::Delete(_), Err(_)) => {}
            }
        }
        self.revision = self.revision.max(revision);
        self.unread = self.unread.with(changed);
        changed
    }
}

/// The message etcd sends for `heard`, for the tests' etcd.
#[cfg(test)]
pub(crate) fn message(heard: &Heard) -> Vec<u8> {
    let mut response = WatchResponse {
        header: None,
        created: false,
        canceled: false,
        compact_revision: 0,
        cancel_reason: String::new(),
        events: Vec::new(),
    };
    match heard {
        Heard::Created => response.created = true,
        Heard::Canceled { compacted, reason } => {
            response.canceled = true;
            response.compact_revision = compacted.unwrap_or(0);
            response.cancel_reason.clone_from(reason);
        }
        Heard::Changes { revision, changes } => {
            response.header = Some(ResponseHeader {
                revision: *revision,
            });
            response.events = changes
                .iter()
                .map(|change| {
                    let (kind, key, value, lease) = match change {
                        KeyChange::Put(kv) => (0, &kv.key, kv.value.clone(), kv.lease),
                        KeyChange::Delete(key) => (1, key, Vec::new(), 0),
                    };
                    WatchEvent {
                        kind,
                        kv: Some(StoredKey {
                            key: key.as_bytes().to_vec(),
                            mod_revision: *revision,
                            value,
                            lease,
                        }),
                    }
                })
                .collect();
        }
    }
    response.encode_to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(message: WatchResponse) -> Vec<u8> {
        message.encode_to_vec()
    }

    fn put(key: &str, value: &str, revision: i64) -> WatchEvent {
        WatchEvent {
            kind: 0,
            kv: Some(StoredKey {
                key: key.into(),
                mod_revision: revision,
                value: value.into(),
                lease: 7,
            }),
        }
    }

    fn changes(revision: i64, events: Vec<WatchEvent>) -> WatchResponse {
        WatchResponse {
            header: Some(ResponseHeader { revision }),
            created: false,
            canceled: false,
            compact_revision: 0,
            cancel_reason: String::new(),
            events,
        }
    }

    #[test]
    fn the_request_asks_for_every_key_under_the_prefix_from_the_revision_after_the_read() {
        let bytes = request("upcheck/", 43);
        let asked = WatchRequest::decode(bytes.as_slice()).expect("decodes");
        let create = asked.create_request.expect("a create request");
        assert_eq!(create.key, b"upcheck/");
        assert_eq!(create.range_end, b"upcheck0");
        assert_eq!(create.start_revision, 43);
    }

    #[test]
    fn puts_and_deletes_are_heard_in_order_with_the_revision_they_bring() {
        let mut message = changes(9, vec![put("upcheck/v1/duty/a", "1", 8)]);
        message.events.push(WatchEvent {
            kind: 1,
            kv: Some(StoredKey {
                key: b"upcheck/v1/duty/b".to_vec(),
                mod_revision: 9,
                value: Vec::new(),
                lease: 0,
            }),
        });
        assert_eq!(
            heard(&response(message)),
            Ok(Heard::Changes {
                revision: 9,
                changes: vec![
                    KeyChange::Put(KeyValue {
                        key: "upcheck/v1/duty/a".into(),
                        value: b"1".to_vec(),
                        lease: 7
                    }),
                    KeyChange::Delete("upcheck/v1/duty/b".into()),
                ]
            })
        );
    }

    #[test]
    fn a_compaction_a_creation_and_garbage_are_told_apart() {
        let mut canceled = changes(9, Vec::new());
        canceled.canceled = true;
        canceled.compact_revision = 5;
        assert_eq!(
            heard(&response(canceled)),
            Ok(Heard::Canceled {
                compacted: Some(5),
                reason: String::new()
            })
        );
        let mut created = changes(9, Vec::new());
        created.created = true;
        assert_eq!(heard(&response(created)), Ok(Heard::Created));
        assert!(heard(b"\xff\xff\xff").is_err());
        assert!(heard(&response(changes(3, vec![put("k", "v", 4)]))).is_err());
        let mut strange = put("k", "v", 3);
        strange.kind = 7;
        assert!(heard(&response(changes(3, vec![strange]))).is_err());
        assert_eq!(
            heard(&response(WatchResponse {
                header: None,
                ..changes(0, vec![put("k", "v", 1)])
            })),
            Err("a watch message without the store's revision".into())
        );
    }

    #[test]
    fn the_keys_kept_follow_the_changes_and_say_which_kinds_changed() {
        let mut follow = Follow::new("etcd_grpc".into(), Layout::new("p"));
        let kv = |key: &str, value: &str| KeyValue {
            key: key.into(),
            value: value.into(),
            lease: 1,
        };
        follow.read(vec![kv("p/v1/duty/b", "1"), kv("p/v1/active/a", "1")], 10);
        let (read, unread) = follow.take_kept();
        assert_eq!(unread, Kinds::ALL, "a read changes every kind");
        follow.restore(read);
        let traffic = vec![KeyChange::Put(kv("p/v1/traffic/1", "x"))];
        let changed = follow.apply(traffic, 11, Time::from_secs(1));
        assert!(changed.within(Kinds::TRAFFIC));
        let more = vec![
            KeyChange::Put(kv("p/v1/active/a", "2")),
            KeyChange::Delete("p/v1/duty/b".into()),
        ];
        let changed = follow.apply(more, 12, Time::from_secs(2));
        assert_eq!(changed, Kinds::ACTIVE.with(Kinds::DUTY));
        let (kept, unread) = follow.take_kept();
        assert_eq!(unread, Kinds::ACTIVE.with(Kinds::DUTY).with(Kinds::TRAFFIC));
        let keys: Vec<(&str, &[u8])> = kept
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.as_slice()))
            .collect();
        assert_eq!(
            keys,
            [("p/v1/active/a", &b"2"[..]), ("p/v1/traffic/1", &b"x"[..])]
        );
        assert_eq!(
            Kinds::of("p/v1/membership", &Layout::new("p")),
            Kinds::OTHER
        );
        assert_eq!(Kinds::of("p/v2/duty/a", &Layout::new("p")), Kinds::OTHER);
        assert_eq!((follow.revision, follow.events), (12, 3));
    }
}
