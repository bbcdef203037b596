//! How many Envoys of one test binary run at once: each holds a [`Turn`] while it runs, and an
//! etcd cluster, whose tests run Envoys of their own, holds every turn.

use std::sync::OnceLock;

use anyhow::Result;
use tokio::sync::{Semaphore, SemaphorePermit};

/// How many Envoys of one test binary run at once unless `UPCHECK_E2E_ENVOYS` says otherwise.
pub const ENVOYS_AT_ONCE: u32 = 4;

/// A test's right to run an Envoy now: one of [`ENVOYS_AT_ONCE`], or all of them.
pub struct Turn {
    _permits: SemaphorePermit<'static>,
}

impl Turn {
    /// One turn, once one is free.
    pub async fn one() -> Result<Turn> {
        Turn::take(1).await
    }

    /// Every turn, once all are free: nothing else of this test binary runs an Envoy until it is
    /// dropped.
    pub async fn alone() -> Result<Turn> {
        Turn::take(turns()?.1).await
    }

    /// `count` turns (all of them at most), once free: for a test that runs that many Envoys.
    pub async fn many(count: u32) -> Result<Turn> {
        Turn::take(count.min(turns()?.1)).await
    }

    async fn take(count: u32) -> Result<Turn> {
        let permits = turns()?.0.acquire_many(count).await?;
        Ok(Turn { _permits: permits })
    }
}

/// The turns of this test binary, and how many there are.
fn turns() -> Result<&'static (Semaphore, u32)> {
    static TURNS: OnceLock<std::result::Result<(Semaphore, u32), String>> = OnceLock::new();
    let turns = TURNS.get_or_init(|| {
        let count = match std::env::var("UPCHECK_E2E_ENVOYS") {
            Err(_) => ENVOYS_AT_ONCE,
            Ok(text) => match text.parse::<u32>() {
                Ok(n) if n >= 1 => n,
                _ => {
                    return Err(format!(
                        "UPCHECK_E2E_ENVOYS={text:?} is not a count of at least 1"
                    ))
                }
            },
        };
        Ok((Semaphore::new(count as usize), count))
    });
    turns.as_ref().map_err(|e| anyhow::anyhow!("{e}"))
}
