//! Tunables of a GIL: the switch interval, the convoy-effect fix and spinning.

use crate::GilError;
use std::time::Duration;

/// Configuration of a [`Gil`](crate::Gil). `Config::default()` matches CPython 3.11's
/// 5 ms switch interval, with the convoy-effect fix on.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// A label used in errors and traces (default `"gil"`).
    pub name: String,
    /// How long a waiting thread lets the holder run before asking it to drop the GIL at
    /// its next poll. `None` never asks: the GIL then changes hands only when released.
    pub switch_interval: Option<Duration>,
    /// The convoy-effect fix: the share of wall time (0.0..=1.0) a thread returning from
    /// a blocking region may spend holding the GIL it took with priority (an immediate
    /// drop request instead of waiting a switch interval). Past that budget it waits like
    /// everyone else, so CPU-bound threads keep their fair share. 0 disables priority.
    pub priority_share: f64,
    /// The most priority time a thread can bank while it does not use it (the token
    /// bucket's size).
    pub priority_burst: Duration,
    /// How long a waiting thread spins (checking for the handoff) before it sleeps.
    pub spin: Duration,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            name: "gil".to_string(),
            switch_interval: Some(Duration::from_millis(5)),
            priority_share: 0.1,
            priority_burst: Duration::from_micros(500),
            spin: Duration::from_micros(20),
        }
    }
}

impl Config {
    /// Checks the values; the error names the offending field and value.
    pub fn validate(&self) -> Result<(), GilError> {
        if let Some(i) = self.switch_interval {
            if i.is_zero() {
                return Err(GilError::InvalidConfig {
                    what: "switch_interval must be positive (use None for no switch requests)"
                        .into(),
                });
            }
        }
        if !(self.priority_share.is_finite() && (0.0..=1.0).contains(&self.priority_share)) {
            return Err(GilError::InvalidConfig {
                what: format!(
                    "priority_share must be within 0.0..=1.0, got {}",
                    self.priority_share
                ),
            });
        }
        if self.spin > Duration::from_millis(10) {
            return Err(GilError::InvalidConfig {
                what: format!("spin must be at most 10 ms, got {:?}", self.spin),
            });
        }
        Ok(())
    }
}
