//! The byte form of the tables workers share (proxy-wasm shared data holds bytes).
//!
//! Compact and fixed-width, so a 1,000-backend table is a few tens of kilobytes and decoding it
//! allocates only the names. Every read is bounds-checked: bytes that are not a table of this
//! version (another build sharing the `vm_id`, a truncated write) decode to an error, never a
//! panic and never a half-read table.
//!
//! Layout: `u` `c` kind version, a u32 entry count, then per entry a u16-prefixed name and the
//! entry's fields; integers little-endian, times in nanoseconds.

use crate::active::{ActiveHealth, ProbeOutcome, Status};
use crate::config::MAX_FAILS_LIMIT;
use crate::passive::PassiveHealth;
use crate::Time;
use std::fmt;
use std::time::Duration;

const VERSION: u8 = 1;
const ACTIVE: u8 = b'a';
const PASSIVE: u8 = b'p';

/// Bytes that are not a table this build can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireError(&'static str);

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.0)
    }
}

struct Writer(Vec<u8>);

impl Writer {
    fn header(kind: u8, entries: usize) -> Writer {
        let mut w = Writer(Vec::with_capacity(8 + entries * 48));
        w.0.extend_from_slice(&[b'u', b'c', kind, VERSION]);
        w.u32(u32::try_from(entries).unwrap_or(u32::MAX));
        w
    }
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn time(&mut self, t: Time) {
        self.u64(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX));
    }
    fn name(&mut self, name: &str) {
        let bytes = name.as_bytes();
        let len = bytes.len().min(usize::from(u16::MAX));
        self.u16(u16::try_from(len).unwrap_or(u16::MAX));
        self.0
            .extend_from_slice(bytes.get(..len).unwrap_or_default());
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

const TRUNCATED: WireError = WireError("the table is truncated");

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if n > self.bytes.len() {
            return Err(TRUNCATED);
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
        self.take(N)?.try_into().map_err(|_| TRUNCATED)
    }
    fn u8(&mut self) -> Result<u8, WireError> {
        Ok(u8::from_le_bytes(self.array()?))
    }
    fn u16(&mut self) -> Result<u16, WireError> {
        Ok(u16::from_le_bytes(self.array()?))
    }
    fn u32(&mut self) -> Result<u32, WireError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, WireError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn time(&mut self) -> Result<Time, WireError> {
        Ok(Duration::from_nanos(self.u64()?))
    }
    fn name(&mut self) -> Result<String, WireError> {
        let len = usize::from(self.u16()?);
        String::from_utf8(self.take(len)?.to_vec()).map_err(|_| WireError("a name is not UTF-8"))
    }
    fn header(&mut self, kind: u8) -> Result<usize, WireError> {
        if self.take(4)? != [b'u', b'c', kind, VERSION] {
            return Err(WireError("not an upcheck table of this version"));
        }
        let entries = usize::try_from(self.u32()?).map_err(|_| TRUNCATED)?;
        // Every entry takes at least 3 bytes: a count larger than that is a lie.
        if entries > self.bytes.len() / 3 {
            return Err(TRUNCATED);
        }
        Ok(entries)
    }
    fn end(&self) -> Result<(), WireError> {
        if self.bytes.is_empty() {
            Ok(())
        } else {
            Err(WireError("the table has trailing bytes"))
        }
    }
}

/// Encodes probe state by backend name.
pub fn encode_active<'a>(entries: &[(&'a str, &'a ActiveHealth)]) -> Vec<u8> {
    let mut w = Writer::header(ACTIVE, entries.len());
    for (name, a) in entries {
        w.name(name);
        w.u8(match a.status {
            Status::Unknown => 0,
            Status::Healthy => 1,
            Status::Unhealthy => 2,
        });
        w.u64(a.streak as u64);
        w.time(a.since);
        match a.last {
            None => w.u8(0),
            Some((at, outcome)) => {
                match outcome {
                    ProbeOutcome::Pass => w.u8(1),
                    ProbeOutcome::Soft(Some(status)) => {
                        w.u8(2);
                        w.u16(status);
                    }
                    ProbeOutcome::Soft(None) => w.u8(3),
                    ProbeOutcome::Timeout(after) => {
                        w.u8(4);
                        w.time(after);
                    }
                    ProbeOutcome::Refused => w.u8(5),
                }
                w.time(at);
            }
        }
    }
    w.0
}

/// Decodes what [`encode_active`] wrote.
pub fn decode_active(bytes: &[u8]) -> Result<Vec<(String, ActiveHealth)>, WireError> {
    let mut r = Reader { bytes };
    let n = r.header(ACTIVE)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.name()?;
        let status = match r.u8()? {
            0 => Status::Unknown,
            1 => Status::Healthy,
            2 => Status::Unhealthy,
            _ => return Err(WireError("unknown status")),
        };
        let streak = r.u64()? as i64;
        let since = r.time()?;
        let outcome = match r.u8()? {
            0 => None,
            1 => Some(ProbeOutcome::Pass),
            2 => Some(ProbeOutcome::Soft(Some(r.u16()?))),
            3 => Some(ProbeOutcome::Soft(None)),
            4 => Some(ProbeOutcome::Timeout(r.time()?)),
            5 => Some(ProbeOutcome::Refused),
            _ => return Err(WireError("unknown probe outcome")),
        };
        let last = match outcome {
            Some(o) => Some((r.time()?, o)),
            None => None,
        };
        entries.push((
            name,
            ActiveHealth {
                status,
                streak,
                last,
                since,
            },
        ));
    }
    r.end()?;
    Ok(entries)
}

/// Encodes passive state by backend name.
pub fn encode_passive<'a>(entries: &[(&'a str, &'a PassiveHealth)]) -> Vec<u8> {
    let mut w = Writer::header(PASSIVE, entries.len());
    for (name, p) in entries {
        w.name(name);
        w.u16(u16::try_from(p.failures.len()).unwrap_or(u16::MAX));
        for t in p.failures.iter().take(usize::from(u16::MAX)) {
            w.time(*t);
        }
        match p.ejected_since {
            None => w.u8(0),
            Some(t) => {
                w.u8(1);
                w.time(t);
            }
        }
        match p.last_contact {
            None => w.u8(0),
            Some((t, refused)) => {
                w.u8(if refused { 2 } else { 1 });
                w.time(t);
            }
        }
    }
    w.0
}

/// Decodes what [`encode_passive`] wrote.
pub fn decode_passive(bytes: &[u8]) -> Result<Vec<(String, PassiveHealth)>, WireError> {
    let mut r = Reader { bytes };
    let n = r.header(PASSIVE)?;
    let mut entries = Vec::with_capacity(n);
    for _ in 0..n {
        let name = r.name()?;
        let count = r.u16()?;
        if u32::from(count) > MAX_FAILS_LIMIT {
            return Err(WireError("more failures than any max_fails"));
        }
        let mut p = PassiveHealth::default();
        for _ in 0..count {
            p.failures.push_back(r.time()?);
        }
        p.ejected_since = match r.u8()? {
            0 => None,
            1 => Some(r.time()?),
            _ => return Err(WireError("bad ejection mark")),
        };
        p.last_contact = match r.u8()? {
            0 => None,
            tag @ (1 | 2) => Some((r.time()?, tag == 2)),
            _ => return Err(WireError("bad contact mark")),
        };
        entries.push((name, p));
    }
    r.end()?;
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn probe_state_survives_the_round_trip() {
        let config =
            Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).unwrap_or_else(|e| panic!("{e}"));
        let active = &config.health_checks.active;
        let mut states = Vec::new();
        for outcome in [
            ProbeOutcome::Pass,
            ProbeOutcome::Soft(Some(503)),
            ProbeOutcome::Soft(None),
            ProbeOutcome::Timeout(secs(5)),
            ProbeOutcome::Refused,
        ] {
            let mut a = ActiveHealth::new(secs(1));
            a.observe(outcome, secs(2), active);
            states.push(a);
        }
        states.push(ActiveHealth::new(secs(3)));
        let names = ["app1", "app2", "app3", "app4", "app5", "späť"];
        let entries: Vec<(&str, &ActiveHealth)> = names.iter().copied().zip(&states).collect();
        let decoded = decode_active(&encode_active(&entries)).unwrap_or_default();
        let expected: Vec<(String, ActiveHealth)> = entries
            .iter()
            .map(|(n, a)| ((*n).to_owned(), **a))
            .collect();
        assert_eq!(decoded, expected);
    }

    #[test]
    fn passive_state_survives_the_round_trip() {
        let config =
            Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).unwrap_or_else(|e| panic!("{e}"));
        let passive = &config.health_checks.passive;
        let mut p = PassiveHealth::default();
        for t in 1..=4 {
            p.record(secs(t), passive);
        }
        p.contact(secs(5), true);
        let empty = PassiveHealth::default();
        let entries = [("app1", &p), ("app2", &empty)];
        let decoded = decode_passive(&encode_passive(&entries)).unwrap_or_default();
        assert_eq!(
            decoded,
            [("app1".to_owned(), p.clone()), ("app2".to_owned(), empty)]
        );
    }

    #[test]
    fn bytes_that_are_not_a_table_are_an_error_not_a_panic() {
        let config =
            Config::parse(br#"{"upstreams":[{"name":"a"}]}"#).unwrap_or_else(|e| panic!("{e}"));
        let mut p = PassiveHealth::default();
        p.record(secs(1), &config.health_checks.passive);
        let good = encode_passive(&[("app1", &p)]);
        for len in 0..good.len() {
            assert!(
                decode_passive(good.get(..len).unwrap_or_default()).is_err(),
                "prefix of {len}"
            );
        }
        assert!(
            decode_active(&good).is_err(),
            "a passive table is not an active one"
        );
        assert!(decode_passive(b"{\"app1\": {}}").is_err());
        let mut huge_count = good.clone();
        huge_count.splice(4..8, u32::MAX.to_le_bytes());
        assert!(decode_passive(&huge_count).is_err());
        let mut trailing = good;
        trailing.push(0);
        assert!(decode_passive(&trailing).is_err());
    }
}
