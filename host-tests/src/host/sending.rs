//! Sending user requests: batches at a rate, single requests, and the records of what became of
//! them, kept in sending order and taken from the front on long runs, so a day of virtual time
//! keeps only the requests in flight in memory.

use super::Host;
use crate::abi::Headers;
use crate::clock::Event;
use crate::error::HostError;
use crate::traffic::{Load, Outcome, RequestRecord, RequestSpec, Traffic};
use std::ops::Range;
use std::time::Duration;

/// How long past its last request a batch may take to finish before open requests are left
/// `Pending`, on top of the route timeout.
const DRAIN_MARGIN: Duration = Duration::from_secs(60);

impl Host {
    /// Sends `GET /` at `rate` per second for `duration`, then lets the requests finish; the clock
    /// ends at the last completion (at least `duration` later).
    pub fn traffic(&mut self, rate: u32, duration: Duration) -> Result<Traffic, HostError> {
        self.load(Load {
            rate,
            duration,
            request: RequestSpec::default(),
        })
    }

    /// Sends `load`, then lets its requests finish (see [`Host::traffic`]).
    pub fn load(&mut self, load: Load) -> Result<Traffic, HostError> {
        let batch = self.send_load(&load)?;
        self.advance(load.duration)?;
        self.drain(batch.clone())?;
        Ok(Traffic {
            requests: self.kept(batch).to_vec(),
        })
    }

    /// Schedules the requests of `load` from now on without moving the clock, for a test that
    /// moves it itself ([`Host::advance`]) and collects the requests with
    /// [`Host::take_finished_records`]. Returns the indexes of the requests, counted from the
    /// first request the host sent.
    pub fn send_load(&mut self, load: &Load) -> Result<Range<usize>, HostError> {
        if load.rate == 0 {
            return Err(HostError::Unsupported("a load of 0 requests/s".to_string()));
        }
        let interval = Duration::from_secs(1) / load.rate;
        let first = self.records_taken + self.records.len();
        let mut offset = Duration::ZERO;
        while offset < load.duration {
            self.schedule_request(offset, load.request.clone());
            offset += interval;
        }
        Ok(first..self.records_taken + self.records.len())
    }

    /// Sends one request now and lets it finish.
    pub fn request(&mut self, request: RequestSpec) -> Result<RequestRecord, HostError> {
        let record = self.records_taken + self.records.len();
        self.schedule_request(Duration::ZERO, request);
        self.drain(record..record + 1)?;
        self.kept(record..record + 1)
            .first()
            .cloned()
            .ok_or_else(|| HostError::Unsupported("a request taken before it finished".into()))
    }

    /// Sends one request `after` from now without waiting for it: it arrives as the clock
    /// passes that instant. Returns its index, counted from the first request the host sent
    /// (its index in [`Host::records`] unless [`Host::take_finished_records`] took some).
    pub fn send(&mut self, after: Duration, request: RequestSpec) -> usize {
        self.schedule_request(after, request);
        self.records_taken + self.records.len() - 1
    }

    /// Every request sent so far, less those taken by [`Host::take_finished_records`].
    pub fn records(&self) -> &[RequestRecord] {
        &self.records
    }

    /// Removes and returns the finished requests at the front of [`Host::records`], in sending
    /// order up to the first one not finished, so that a long run keeps only the requests in
    /// flight in memory.
    pub fn take_finished_records(&mut self) -> Traffic {
        let finished = self
            .records
            .iter()
            .take_while(|r| r.outcome != Outcome::Pending)
            .count();
        self.records_taken += finished;
        Traffic {
            requests: self.records.drain(..finished).collect(),
        }
    }

    /// The kept records of the requests with indexes `batch` (those not taken yet).
    fn kept(&self, batch: Range<usize>) -> &[RequestRecord] {
        let start = batch.start.saturating_sub(self.records_taken);
        let end = batch.end.saturating_sub(self.records_taken);
        self.records.get(start..end).unwrap_or_default()
    }

    /// The record of the request with index `index`, unless it was taken.
    pub(super) fn record_mut(&mut self, index: usize) -> Option<&mut RequestRecord> {
        let kept = index.checked_sub(self.records_taken)?;
        self.records.get_mut(kept)
    }

    fn schedule_request(&mut self, after: Duration, request: RequestSpec) {
        let record = self.records_taken + self.records.len();
        self.records.push(RequestRecord {
            request,
            sent: self.now() + after,
            worker: 0,
            upstream: None,
            routed: None,
            route_header: None,
            outcome: Outcome::Pending,
            completed: None,
            flags: 0,
            details: String::new(),
            fuel: 0,
            body: Vec::new(),
            headers: Headers::new(),
        });
        let event = Event::RequestArrives { record };
        self.process.borrow_mut().clock.schedule(after, event);
    }

    /// Runs the clock until every request in `batch` has finished, or the drain limit.
    fn drain(&mut self, batch: Range<usize>) -> Result<(), HostError> {
        let last_sent = self.kept(batch.clone()).iter().map(|r| r.sent).max();
        let limit = last_sent.unwrap_or_default() + self.options.route_timeout + DRAIN_MARGIN;
        while self
            .kept(batch.clone())
            .iter()
            .any(|r| r.outcome == Outcome::Pending)
        {
            let next = self.process.borrow().clock.next_due();
            match next {
                Some(at) if at <= limit => self.advance_to(at)?,
                _ => break,
            }
        }
        Ok(())
    }
}
