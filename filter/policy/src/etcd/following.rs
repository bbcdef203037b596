//! Following the prefix: read on the clock ([`READ_EVERY`], once more after [`READ_AGAIN`] when
//! a read fails), or, with a `watch_cluster`, read once and then watched ([`watch`]). Here is the
//! watch's life as this balancer lives it: opened once the prefix is read, confirmed by etcd,
//! refused by the proxy (the prefix read on the clock meanwhile), stalled, ended and resumed from
//! the revision after the last one heard, or read again after a compaction.

use super::clocks::Arrival;
use super::{
    due, gateway, watch, Call, FleetPart, OpenWatch, Request, Watched, READ_AGAIN, READ_EVERY,
};
use crate::level::Level;
use crate::time::Time;

impl FleetPart {
    /// When the prefix was last read.
    pub fn last_read(&self) -> Option<Time> {
        self.read
    }

    /// The read of the prefix at `now`, into `out`, if one is due: with a watch, only before it
    /// opens (first, after a compaction, and while the proxy will not open one).
    pub(super) fn read_due(&mut self, now: Time, out: &mut Vec<Request>) {
        let every = if self.failed_reads == 1 {
            READ_AGAIN
        } else {
            READ_EVERY
        };
        if self.follow.as_ref().is_some_and(|f| !f.unread.is_empty()) {
            self.take_in_kept(now);
        }
        let reading = self.follow.as_ref().is_none_or(|f| {
            f.revision == 0 || f.stale || (f.refused.is_some() && f.stream == watch::Stream::Closed)
        });
        if reading && due(now, self.asked, every) && !self.busy(|c| matches!(c, Call::Read)) {
            self.asked = Some(now);
            let body = gateway::range(self.keys.all());
            out.push(self.request(Call::Read, "/v3/kv/range", body));
        }
    }

    /// What came of a read of the prefix, at `now`.
    pub(super) fn read_answered(&mut self, answer: Result<gateway::Range, String>, now: Time) {
        match answer {
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
                self.failed(why);
            }
        }
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

    /// The watch to open now, if one is due: the prefix has been read, no stream is open or
    /// opening, and the proxy did not refuse one within [`watch::REOPEN_AFTER`].
    pub fn watch_due(&mut self, now: Time) -> Option<OpenWatch> {
        let token = self.join.auth.clone();
        let wants_token = self.settings.credentials().is_some();
        let keys = &self.keys;
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
            message: watch::request(keys.all(), follow.revision + 1),
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
                // A value heard as it is put says how far its writer's clock is off.
                for change in &changes {
                    if let watch::KeyChange::Put(kv) = change {
                        self.evidence
                            .clocks
                            .heard_value(kv, now, Arrival::Delivered);
                    }
                }
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
}
