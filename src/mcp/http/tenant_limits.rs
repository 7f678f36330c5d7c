//! Per-tenant limits on calls (`--tenant-max-calls`,
//! `--tenant-calls-per-second`, with `--auth-tokens`): one tenant's burst
//! cannot take every worker from the others. A `tools/call` past either
//! limit is answered 429 with `Retry-After` before it reaches the pool.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The limits, and each tenant's use of them.
#[derive(Debug)]
pub(crate) struct TenantLimits {
    /// Calls of one tenant in flight at once.
    max_calls: Option<usize>,
    /// Calls one tenant may start a second, on average (a burst of as many
    /// at once, at least one).
    per_second: Option<f64>,
    usage: Mutex<HashMap<String, Usage>>,
}

#[derive(Debug)]
struct Usage {
    in_flight: usize,
    /// Calls it may start now (a token bucket).
    tokens: f64,
    refilled: Instant,
}

/// Why a call is refused, and when to come back.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Over {
    /// `max` calls of the tenant run already.
    InFlight { max: usize },
    /// The tenant started its calls of the second already.
    Rate {
        per_second: f64,
        retry_after: Duration,
    },
}

impl Over {
    /// Whole seconds, at least one, for `Retry-After`.
    pub(crate) fn retry_after_secs(&self) -> u64 {
        match self {
            Over::InFlight { .. } => 1,
            Over::Rate { retry_after, .. } => retry_after.as_secs_f64().ceil().max(1.0) as u64,
        }
    }
}

impl std::fmt::Display for Over {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Over::InFlight { max } => write!(
                f,
                "this tenant has {max} calls in flight, its limit (--tenant-max-calls); retry when one has ended"
            ),
            Over::Rate { per_second, .. } => write!(
                f,
                "this tenant starts at most {per_second} calls a second (--tenant-calls-per-second); retry later"
            ),
        }
    }
}

/// One call of a tenant, counted in flight until dropped.
#[derive(Debug)]
pub(crate) struct CallPermit {
    limits: Arc<TenantLimits>,
    tenant: String,
}

impl Drop for CallPermit {
    fn drop(&mut self) {
        if let Ok(mut usage) = self.limits.usage.lock() {
            if let Some(usage) = usage.get_mut(&self.tenant) {
                usage.in_flight = usage.in_flight.saturating_sub(1);
            }
        }
    }
}

impl TenantLimits {
    /// `None` when neither limit is set.
    pub(crate) fn new(max_calls: Option<usize>, per_second: Option<f64>) -> Option<Arc<Self>> {
        (max_calls.is_some() || per_second.is_some()).then(|| {
            Arc::new(TenantLimits {
                max_calls,
                per_second,
                usage: Mutex::new(HashMap::new()),
            })
        })
    }

    /// A call of `tenant` at `now`: its permit, or why not.
    pub(crate) fn admit(self: &Arc<Self>, tenant: &str, now: Instant) -> Result<CallPermit, Over> {
        let mut all = match self.usage.lock() {
            Ok(usage) => usage,
            Err(poisoned) => poisoned.into_inner(),
        };
        let burst = self.per_second.map_or(0.0, |rate| rate.max(1.0));
        let usage = all.entry(tenant.to_string()).or_insert(Usage {
            in_flight: 0,
            tokens: burst,
            refilled: now,
        });
        if let Some(max) = self.max_calls {
            if usage.in_flight >= max {
                return Err(Over::InFlight { max });
            }
        }
        if let Some(rate) = self.per_second {
            let elapsed = now.saturating_duration_since(usage.refilled).as_secs_f64();
            usage.tokens = (usage.tokens + elapsed * rate).min(burst);
            usage.refilled = now;
            if usage.tokens < 1.0 {
                let retry_after = Duration::from_secs_f64((1.0 - usage.tokens) / rate);
                return Err(Over::Rate {
                    per_second: rate,
                    retry_after,
                });
            }
            usage.tokens -= 1.0;
        }
        usage.in_flight += 1;
        Ok(CallPermit {
            limits: self.clone(),
            tenant: tenant.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_flight_are_counted_per_tenant_until_their_permit_drops() {
        let limits = TenantLimits::new(Some(2), None).unwrap();
        let now = Instant::now();
        let first = limits.admit("alice", now).unwrap();
        let _second = limits.admit("alice", now).unwrap();
        let over = limits.admit("alice", now).unwrap_err();
        assert_eq!(over, Over::InFlight { max: 2 });
        assert_eq!(over.retry_after_secs(), 1);
        // Another tenant is not held back by alice's calls.
        let _bob = limits.admit("bob", now).unwrap();
        drop(first);
        let _third = limits.admit("alice", now).unwrap();
    }

    #[test]
    fn the_rate_allows_a_burst_then_one_call_per_refill() {
        let limits = TenantLimits::new(None, Some(2.0)).unwrap();
        let start = Instant::now();
        for _ in 0..2 {
            drop(limits.admit("alice", start).unwrap());
        }
        let Err(Over::Rate { retry_after, .. }) = limits.admit("alice", start) else {
            panic!("a third call in the same instant passed");
        };
        assert_eq!(retry_after, Duration::from_millis(500));
        assert!(limits.admit("bob", start).is_ok());
        // Half a second later one more is allowed, and only one.
        let later = start + Duration::from_millis(500);
        assert!(limits.admit("alice", later).is_ok());
        assert!(limits.admit("alice", later).is_err());
        assert!(TenantLimits::new(None, None).is_none());
    }
}
