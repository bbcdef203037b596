//! The pool's part in the history of changes ([`crate::history`]): which events are changes,
//! with the log line's reason as their cause; which changes of the process-wide history are
//! this pool's; how many it keeps; and how a change is logged in each `log_format`.

use super::Pool;
use crate::events::{Effects, Event, InHistory};
use crate::history::Change;
use crate::lease::fingerprint;
use crate::time::Time;
use upcheck_config::LogFormat;

impl<H> Pool<H> {
    /// The pool's key in the history, for the pool guard's changes: a fingerprint of its
    /// backends' keys, in order, so a status page configured with the pool's backends shares it.
    pub fn history_key(&self) -> String {
        let keys: Vec<&str> = self.members().iter().map(|m| m.key.as_str()).collect();
        format!("pool:{:016x}", fingerprint(keys.join("\n").as_bytes()))
    }

    /// The change `event` is, at `now`, if it is one.
    pub fn change_of(&self, event: &Event, now: Time) -> Option<Change> {
        let InHistory { kind, backend } = event.described().change?;
        let key = match backend {
            Some(name) => {
                let index = self.index_of(name)?;
                self.members().get(index)?.key.clone()
            }
            None => self.history_key(),
        };
        let line = event.to_string();
        let cause = match backend {
            Some(name) => line
                .strip_prefix(name)
                .and_then(|rest| rest.strip_prefix(' '))
                .map(str::to_owned)
                .unwrap_or_else(|| line.clone()),
            None => line,
        };
        Some(Change::new(
            now,
            backend.map(str::to_owned),
            key,
            kind,
            cause,
        ))
    }

    /// Which changes of the process-wide history are this pool's: those of its backends and of
    /// its pool guard.
    pub fn owns(&self) -> impl Fn(&Change) -> bool {
        let mut keys: Vec<String> = self.members().iter().map(|m| m.key.clone()).collect();
        keys.push(self.history_key());
        keys.sort_unstable();
        move |change: &Change| keys.binary_search(&change.key).is_ok()
    }

    /// This pool's newest changes, oldest first, as the process-wide history was last read or
    /// written here.
    pub fn history(&self) -> &[Change] {
        &self.history
    }

    /// The process-wide history as read or written: this pool keeps its own newest `history`
    /// changes of it.
    pub fn history_published(&mut self, table: &[Change]) -> Effects {
        let mine = self.owns();
        let size = usize::try_from(self.config().history).unwrap_or(usize::MAX);
        let owned: Vec<&Change> = table.iter().filter(|c| mine(c)).collect();
        let skip = owned.len().saturating_sub(size);
        self.history = owned.into_iter().skip(skip).cloned().collect();
        Effects::default()
    }

    /// The line `event` is logged as at `now`: in `log_format: "json"` a change is its JSON
    /// object ([`Change::json`]); anything else is its prose.
    pub fn log_line(&self, event: &Event, now: Time) -> String {
        match self.config().log_format {
            LogFormat::Json => match self.change_of(event, now) {
                Some(change) => change.json(),
                None => event.to_string(),
            },
            LogFormat::Text => event.to_string(),
        }
    }
}
