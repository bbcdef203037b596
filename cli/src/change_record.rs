//! Who asked for each membership change, and why: a [`Record`] kept with the membership (in
//! FILE's state, and in the fleet's value in etcd), the last [`KEPT`] of them, shown by
//! `upcheck backends list` (each backend's last change), `upcheck backends history` (all kept)
//! and each follower's log line.
//!
//! The membership is read by every follower, and whoever may write it may be hostile: a record
//! read is refused unless it is bounded and plain, so that a log line or a terminal shows what
//! it says and nothing else: `by` 1 to [`BY_MAX`] characters of letters, digits and `._@:+-`;
//! `reason` and `what` at most [`REASON_MAX`] printable ASCII characters (no control
//! character, so no terminal escape, no line break; nothing beyond ASCII, so no bidirectional
//! override); `backend` as `reason` (a name the configuration allows is printable ASCII); at most [`KEPT`] records.
//! A membership with a record refused is refused whole, as any other bad membership is.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// How many records the membership keeps, the latest last.
pub const KEPT: usize = 20;
/// The longest `by`, in characters.
pub const BY_MAX: usize = 64;
/// The longest `reason` or `what`, in characters.
pub const REASON_MAX: usize = 200;

/// One change to the membership: when, what, who asked, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// When, in seconds since 1970 (UTC).
    pub at: u64,
    /// The backend it changed.
    pub backend: String,
    /// What it did, e.g. `add 10.0.0.7:8080`, `drain`, `back in service` (a drain ended), `remove`.
    pub what: String,
    /// Who asked (`--by`; by default the local user and host, `user@host`).
    pub by: String,
    /// Why (`--reason`), if said.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Whether `by` may name who asked: why not, if not.
pub fn check_by(by: &str) -> Result<(), String> {
    let fits = |c: char| c.is_ascii_alphanumeric() || "._@:+-".contains(c);
    match by.chars().count() {
        0 => Err("is empty".into()),
        n if n > BY_MAX => Err(format!("is {n} characters long, over {BY_MAX}")),
        _ if !by.chars().all(fits) => {
            Err("has a character other than letters, digits and ._@:+-".into())
        }
        _ => Ok(()),
    }
}

/// Whether `text` may be a reason or a what: why not, if not.
pub fn check_text(text: &str) -> Result<(), String> {
    match text.chars().count() {
        n if n > REASON_MAX => Err(format!("is {n} characters long, over {REASON_MAX}")),
        _ if !text.chars().all(|c| matches!(c, ' '..='~')) => Err(
            "has a character that is not printable ASCII (a control character, a line break, \
             or beyond ASCII)"
                .into(),
        ),
        _ => Ok(()),
    }
}

/// Whether `records`, read from a membership, may be taken in: why not, if not.
pub fn check(records: &[Record]) -> Result<(), String> {
    if records.len() > KEPT {
        return Err(format!("{} change records, over {KEPT}", records.len()));
    }
    for (i, r) in records.iter().enumerate() {
        let at = |field: &str, why: String| format!("history[{i}].{field} {why}");
        check_by(&r.by).map_err(|why| at("by", why))?;
        check_text(&r.what).map_err(|why| at("what", why))?;
        if let Some(reason) = &r.reason {
            check_text(reason).map_err(|why| at("reason", why))?;
        }
        check_text(&r.backend).map_err(|why| at("backend", why))?;
    }
    Ok(())
}

/// Who runs this command, as `--by` defaults to it: `$USER` (or `$LOGNAME`, or the name of
/// this process's uid) at the host's name; `unknown` for a part not found, and for the whole
/// when it is not plain.
pub fn local_user() -> String {
    let user = ["USER", "LOGNAME"]
        .iter()
        .find_map(|v| std::env::var(v).ok().filter(|u| !u.is_empty()))
        .or_else(user_of_uid);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty());
    let by = match (user, host) {
        (Some(user), Some(host)) => format!("{user}@{host}"),
        (Some(user), None) => user,
        (None, Some(host)) => format!("unknown@{host}"),
        (None, None) => "unknown".into(),
    };
    match check_by(&by) {
        Ok(()) => by,
        Err(_) => "unknown".into(),
    }
}

/// This process's user name by its uid, from `/proc/self/status` and `/etc/passwd` (a service
/// or a container often has no `$USER`).
fn user_of_uid() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))?
        .split_whitespace()
        .next()?
        .to_owned();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let mut fields = line.split(':');
        let name = fields.next()?;
        (fields.nth(1)? == uid).then(|| name.to_owned())
    })
}

/// The record of a change to `backend` that did `what`, asked by `by` for `reason`, now.
pub fn record(backend: &str, what: String, by: &str, reason: Option<&str>) -> Record {
    Record {
        at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        backend: backend.to_owned(),
        what,
        by: by.to_owned(),
        reason: reason.map(str::to_owned),
    }
}

/// `records` with `new` last, the oldest left out past [`KEPT`].
pub fn appended(records: &[Record], new: Record) -> Vec<Record> {
    let skip = (records.len() + 1).saturating_sub(KEPT);
    records.iter().skip(skip).cloned().chain([new]).collect()
}

/// `at` as `2026-12-06 22:30:01 UTC`.
pub fn when(at: u64) -> String {
    let (year, month, day) = upcheck_policy::time::civil_date(at / 86_400);
    let s = at % 86_400;
    format!(
        "{year}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

impl Record {
    /// What was done and by whom, without the backend's name: `add 10.0.0.7:8080 by
    /// alice@lb1 at 2026-12-06 22:30:01 UTC: new release`.
    pub fn said(&self) -> String {
        let reason = self
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!("{} by {} at {}{reason}", self.what, self.by, when(self.at))
    }

    /// The line `upcheck backends history` prints: `2026-12-06 22:30:01 UTC  app3  add
    /// 10.0.0.7:8080  by alice@lb1: new release`.
    pub fn line(&self) -> String {
        let reason = self
            .reason
            .as_deref()
            .map(|r| format!(": {r}"))
            .unwrap_or_default();
        format!(
            "{}\t{}\t{}\tby {}{reason}",
            when(self.at),
            self.backend,
            self.what,
            self.by
        )
    }
}

/// The last of `records` that changed `backend`, as said in `list`.
pub fn last_of<'a>(records: &'a [Record], backend: &str) -> Option<&'a Record> {
    records.iter().rev().find(|r| r.backend == backend)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(by: &str, reason: Option<&str>) -> Record {
        Record {
            at: 1_765_059_001,
            backend: "app3".into(),
            what: "add 10.0.0.7:8080".into(),
            by: by.into(),
            reason: reason.map(str::to_owned),
        }
    }

    #[test]
    fn a_plain_record_is_taken_and_said_with_its_time_in_utc() {
        let r = a("alice@lb-1", Some("new release"));
        assert_eq!(check(std::slice::from_ref(&r)), Ok(()));
        assert_eq!(
            r.said(),
            "add 10.0.0.7:8080 by alice@lb-1 at 2025-12-06 22:10:01 UTC: new release"
        );
    }

    #[test]
    fn a_hostile_writers_records_are_refused_naming_the_field() {
        let long = "x".repeat(BY_MAX + 1);
        let cases = [
            (a("", None), "history[0].by is empty"),
            (
                a(&long, None),
                "history[0].by is 65 characters long, over 64",
            ),
            (a("eve\u{1b}[2J", None), "history[0].by has a character"),
            (a("eve", Some("ok\nforged line")), "history[0].reason has a"),
            (a("eve", Some("\u{202e}txt.exe")), "history[0].reason has a"),
            (a("eve", Some(&"y".repeat(201))), "history[0].reason is 201"),
        ];
        for (record, said) in cases {
            let why = check(std::slice::from_ref(&record)).expect_err("refused");
            assert!(why.starts_with(said), "{record:?}: {why}");
        }
        let many = vec![a("alice", None); KEPT + 1];
        assert_eq!(check(&many), Err("21 change records, over 20".into()));
    }

    #[test]
    fn the_records_kept_are_the_last_twenty() {
        let mut records = Vec::new();
        for i in 0..25 {
            records = appended(&records, a(&format!("op{i}"), None));
        }
        assert_eq!(records.len(), KEPT);
        assert_eq!(records.first().map(|r| r.by.as_str()), Some("op5"));
        assert_eq!(records.last().map(|r| r.by.as_str()), Some("op24"));
    }

    #[test]
    fn without_user_in_the_environment_the_user_is_the_uids_name_as_id_says() {
        let id = std::process::Command::new("id")
            .arg("-un")
            .output()
            .unwrap();
        let name = String::from_utf8(id.stdout).unwrap();
        assert_eq!(user_of_uid().as_deref(), Some(name.trim()));
    }

    #[test]
    fn the_local_user_is_plain_whatever_the_environment() {
        assert_eq!(check_by(&local_user()), Ok(()));
    }
}
