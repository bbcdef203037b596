//! What the status page shows of the fleet: per backend, which balancer holds its probe duty;
//! when the shared view was last read; whether this balancer has fallen back to local.
//!
//! Only the prober VM speaks to etcd, and the page is answered by another VM (the status page
//! listener's), so the prober writes this small record into shared data, by prefix
//! ([`crate::tables::fleet_key`]), whenever it changes, and the page reads it back as untrusted
//! bytes ([`Shown::decode`]). A balancer is named by its etcd lease ID, never by
//! anything of its credentials.
//!
//! The record is kept in the announcements' form, a key and a number per entry, so its bytes
//! cost no code of their own: nine entries without a key (this balancer's lease or 0, 1 if it
//! has fallen back to local, when it last read in milliseconds plus one or 0, how many balancers
//! it counted; then its watch: 0 without one, 1 while not in place, 2 in place; the revision it
//! holds; the changes it heard; its fresh reads after the first; when it last heard a change, in
//! milliseconds plus one or 0), then each backend's key and its duty holder's lease (0: nobody;
//! etcd never grants lease 0), then, per backend and other balancer that published failures of
//! it, `failing {path|backend} {lease in hex} {backend key}` and the newest of them, in
//! milliseconds plus one (a backend's key holds no space, so the two kinds of entry never meet).
//! The page shows those still within `fail_duration`: which balancers see the backend failing,
//! and whether what they see may be their path ([`crate::outcome::About`]).

use super::{watch, Duty, FleetPart};
use crate::outcome::About;
use crate::tables::{self, AnnounceTable, TableError, FLEET_HEAD as HEAD};
use crate::time::Time;

/// A time as an entry's number: milliseconds plus one, 0 for none.
fn millis(t: Option<Time>) -> u64 {
    t.map_or(0, |t| {
        let ms = t.as_secs().saturating_mul(1000);
        ms.saturating_add(u64::from(t.subsec_millis()) + 1)
    })
}

/// The watch as the page shows it: etcd's Watch followed over a gRPC stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Watching {
    /// Whether the watch is in place (else the prefix is read until it is).
    pub live: bool,
    /// The store's revision the balancer holds.
    pub revision: u64,
    /// Changes heard on the stream.
    pub events: u64,
    /// Fresh reads after the first (after a compaction, or garbage on the stream).
    pub resyncs: u64,
    /// When the last change was heard.
    pub last_event: Option<Time>,
}

impl Watching {
    /// What `follow` shows.
    pub fn of(follow: &watch::Follow) -> Watching {
        Watching {
            live: follow.live(),
            revision: u64::try_from(follow.revision).unwrap_or(0),
            events: follow.events,
            resyncs: follow.resyncs,
            last_event: follow.last_event,
        }
    }
}

/// The fleet as one balancer sees it, for its status page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown(AnnounceTable);

/// Where one backend's probe duty is, as the page says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Holder {
    /// Probed by this balancer: it holds the duty, or has fallen back to local.
    Here,
    /// Probed by the balancer with this lease ID.
    Other(i64),
    /// Nobody holds it yet.
    Nobody,
}

/// How the entry of a balancer that sees a backend failing begins.
const FAILING: &str = "failing ";

/// A lease ID (or none, 0) as an entry's number.
fn lease(l: Option<i64>) -> u64 {
    l.map_or(0, |l| u64::from_le_bytes(l.to_le_bytes()))
}

/// A lease ID back from its entry's number.
fn signed(n: u64) -> i64 {
    i64::from_le_bytes(n.to_le_bytes())
}

/// What a balancer says of itself in the fleet, for [`Shown::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overview {
    /// Its lease, once it has one.
    pub me: Option<i64>,
    /// Whether it fell back to probing every backend itself.
    pub local: bool,
    /// When it last read the shared view.
    pub read: Option<Time>,
    /// How many balancers that read counted.
    pub balancers: usize,
    /// Its watch, when it follows etcd by one.
    pub watching: Option<Watching>,
}

impl Shown {
    /// A balancer as `overview` says, and where each backend's duty is, by key: the
    /// holder's lease, or none.
    pub fn new(overview: Overview, duties: impl Iterator<Item = (String, Option<i64>)>) -> Shown {
        let Overview {
            me,
            local,
            read,
            balancers,
            watching,
        } = overview;
        let balancers = u64::try_from(balancers).unwrap_or(u64::MAX);
        let watch = watching.map_or([0; 5], |w| {
            [
                1 + u64::from(w.live),
                w.revision,
                w.events,
                w.resyncs,
                millis(w.last_event),
            ]
        });
        let [state, revision, events, resyncs, last] = watch;
        let head = [
            lease(me),
            u64::from(local),
            millis(read),
            balancers,
            state,
            revision,
            events,
            resyncs,
            last,
        ];
        Shown(
            head.into_iter()
                .map(|n| (String::new(), n))
                .chain(duties.map(|(k, l)| (k, lease(l))))
                .collect(),
        )
    }

    /// What `fleet` shows of the backends whose keys are `keys`.
    pub fn of<'a>(fleet: &FleetPart, keys: impl Iterator<Item = &'a str> + Clone) -> Shown {
        let me = fleet.lease();
        let mut failing: Vec<(String, u64)> = Vec::new();
        for key in keys.clone() {
            for (by, failure) in fleet.fleet_failures(key) {
                let about = match failure.about {
                    About::Path => "path",
                    About::Backend => "backend",
                };
                let entry = format!("{FAILING}{about} {by:x} {key}");
                let at = millis(Some(failure.at));
                match failing.iter_mut().find(|(k, _)| *k == entry) {
                    Some((_, newest)) => *newest = (*newest).max(at),
                    None => failing.push((entry, at)),
                }
            }
        }
        let duties = keys.map(|key| {
            let holder = match fleet.duty(key) {
                Duty::Here => me,
                Duty::Elsewhere { holder, .. } => holder,
            };
            (key.to_owned(), holder)
        });
        let overview = Overview {
            me,
            local: fleet.local(),
            read: fleet.last_read(),
            balancers: fleet.balancers(),
            watching: fleet.watch().map(Watching::of),
        };
        let mut shown = Shown::new(overview, duties);
        shown.0.extend(failing);
        shown
    }

    /// The other balancers that published failures of the backend whose key is `key` since
    /// `since`: each one's lease, and whether what it saw may be its path.
    pub fn failing(&self, key: &str, since: Time) -> Vec<(i64, About)> {
        let since = millis(Some(since));
        self.0
            .iter()
            .skip(HEAD)
            .filter(|(_, newest)| *newest >= since)
            .filter_map(|(entry, _)| {
                let rest = entry.strip_prefix(FAILING)?;
                let (about, rest) = rest.split_once(' ')?;
                let (lease, backend) = rest.split_once(' ')?;
                let about = match about {
                    "path" => About::Path,
                    "backend" => About::Backend,
                    _ => return None,
                };
                let lease = i64::from_str_radix(lease, 16).ok()?;
                (backend == key).then_some((lease, about))
            })
            .collect()
    }

    /// Its bytes, for shared data.
    pub fn encode(&self) -> Vec<u8> {
        tables::encode_fleet(&self.0)
    }

    /// Reads back what [`Shown::encode`] wrote, refusing bytes that are not such a record.
    pub fn decode(bytes: &[u8]) -> Result<Shown, TableError> {
        tables::decode_fleet(bytes).map(Shown)
    }

    fn head(&self, at: usize) -> u64 {
        self.0.get(at).map_or(0, |(_, n)| *n)
    }

    /// This balancer's lease ID, once it has one.
    pub fn me(&self) -> Option<i64> {
        Some(signed(self.head(0))).filter(|l| *l != 0)
    }

    /// Whether it has fallen back to probing every backend itself (etcd unreachable).
    pub fn local(&self) -> bool {
        self.head(1) != 0
    }

    /// When it last read the shared view (to the millisecond).
    pub fn read(&self) -> Option<Time> {
        self.head(2).checked_sub(1).map(Time::from_millis)
    }

    /// How many balancers that read counted.
    pub fn balancers(&self) -> u64 {
        self.head(3)
    }

    /// Its watch of etcd, if it has one.
    pub fn watching(&self) -> Option<Watching> {
        let state = self.head(4);
        (state != 0).then(|| Watching {
            live: state == 2,
            revision: self.head(5),
            events: self.head(6),
            resyncs: self.head(7),
            last_event: self.head(8).checked_sub(1).map(Time::from_millis),
        })
    }

    /// Where the probe duty of the backend whose key is `key` is; `None` if this record does
    /// not know the backend.
    pub fn holder(&self, key: &str) -> Option<Holder> {
        let (_, holder) = self.0.iter().skip(HEAD).find(|(k, _)| k == key)?;
        let holder = signed(*holder);
        Some(match holder {
            _ if self.local() => Holder::Here,
            0 => Holder::Nobody,
            l if Some(l) == self.me() => Holder::Here,
            l => Holder::Other(l),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(local: bool) -> Shown {
        let duties = [("a", Some(0x2a)), ("b", Some(0xff)), ("c", None)];
        let duties = duties.into_iter().map(|(k, l)| (k.to_owned(), l));
        let watching = Watching {
            live: true,
            revision: 42,
            events: 7,
            resyncs: 1,
            last_event: Some(Time::from_millis(2_500)),
        };
        let overview = Overview {
            me: Some(0x2a),
            local,
            read: Some(Time::from_secs(3)),
            balancers: 3,
            watching: Some(watching),
        };
        Shown::new(overview, duties)
    }

    #[test]
    fn a_duty_is_here_with_another_balancer_by_its_lease_or_with_nobody() {
        let s = shown(false);
        assert_eq!(s.holder("a"), Some(Holder::Here));
        assert_eq!(s.holder("b"), Some(Holder::Other(0xff)));
        assert_eq!(s.holder("c"), Some(Holder::Nobody));
        assert_eq!(s.holder("d"), None);
        assert_eq!(s.holder(""), None, "the head is no backend");
        assert_eq!(
            (s.me(), s.local(), s.read(), s.balancers()),
            (Some(0x2a), false, Some(Time::from_secs(3)), 3)
        );
        let watching = s.watching().expect("a watch");
        assert_eq!(
            (
                watching.live,
                watching.revision,
                watching.events,
                watching.resyncs
            ),
            (true, 42, 7, 1)
        );
        assert_eq!(watching.last_event, Some(Time::from_millis(2_500)));
        assert_eq!(Shown::decode(&s.encode()), Ok(s), "the round trip");
    }

    #[test]
    fn a_balancer_fallen_back_to_local_probes_every_backend_here() {
        let s = shown(true);
        for key in ["a", "b", "c"] {
            assert_eq!(s.holder(key), Some(Holder::Here), "{key}");
        }
    }

    #[test]
    fn a_balancer_without_a_lease_or_a_read_says_so() {
        let alone = Overview {
            me: None,
            local: true,
            read: None,
            balancers: 0,
            watching: None,
        };
        let s = Shown::new(alone, std::iter::empty());
        assert_eq!((s.me(), s.read(), s.local()), (None, None, true));
        assert_eq!(s.watching(), None, "it reads on the clock");
        assert_eq!(Shown::decode(&s.encode()), Ok(s));
        let headless = tables::encode_fleet(&vec![(String::new(), 1)]);
        assert!(Shown::decode(&headless).is_err());
    }
}
