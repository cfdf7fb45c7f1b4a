//! Fair shares of the endpoint: the requests one principal and one namespace may have in
//! progress at once (held calls and their streams included, until they end), and how many
//! failed authentications one client address may cause before it is turned away for a while.
//! Without them one token could hold every request slot, and random tokens each cost the
//! cluster a TokenReview.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Of the endpoint's request slots, what one principal may hold: a quarter.
pub(super) const PRINCIPAL_SHARE: usize = 4;
/// Of the endpoint's request slots, what one namespace may hold: a half.
pub(super) const NAMESPACE_SHARE: usize = 2;
/// Failed authentications one client address may cause per window.
pub(super) const MAX_AUTH_FAILURES: u32 = 50;
/// The window failed authentications are counted in, in seconds.
pub(super) const AUTH_FAILURE_WINDOW_SECS: u64 = 10;
/// Addresses remembered at most; past it the oldest windows are forgotten.
const ADDRESSES_REMEMBERED: usize = 10_000;

/// Requests in progress, by principal and by namespace.
#[derive(Default)]
pub(crate) struct Shares {
    taken: Mutex<Taken>,
}

/// Requests in progress of each principal and each namespace that has any. Keys are shared
/// with the [`Share`]s that hold them: a request in a busy namespace copies no name.
#[derive(Default)]
struct Taken {
    principals: HashMap<Arc<str>, usize>,
    namespaces: HashMap<Arc<str>, usize>,
}

impl Taken {
    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.principals.is_empty() && self.namespaces.is_empty()
    }
}

/// What one request holds of [`Shares`]; given back when dropped (with the response body, so
/// a held call's stream keeps it to its end).
pub(crate) struct Share {
    of: Arc<Shares>,
    principal: Arc<str>,
    namespace: Arc<str>,
}

/// Count one more request of `name` in `counts` (which must be below its cap); the key held.
fn hold(counts: &mut HashMap<Arc<str>, usize>, name: &str) -> Arc<str> {
    if let Some((k, n)) = counts.get_key_value(name) {
        let k = k.clone();
        *counts.get_mut(name).expect("just found") = n + 1;
        return k;
    }
    let k: Arc<str> = Arc::from(name);
    counts.insert(k.clone(), 1);
    k
}

/// Count one request of `name` less in `counts`, forgetting it at zero.
fn give_back(counts: &mut HashMap<Arc<str>, usize>, name: &str) {
    if let Some(n) = counts.get_mut(name) {
        *n -= 1;
        if *n == 0 {
            counts.remove(name);
        }
    }
}

impl Shares {
    /// A share for a request of `principal` in `namespace`, out of `slots` in all; `None`
    /// when either already holds its part.
    pub(super) fn take(
        self: &Arc<Self>,
        principal: &str,
        namespace: &str,
        slots: usize,
    ) -> Option<Share> {
        let mut taken = self.taken.lock().expect("shares lock");
        let full = |counts: &HashMap<Arc<str>, usize>, name: &str, cap: usize| {
            counts.get(name).copied().unwrap_or(0) >= cap.max(1)
        };
        if full(&taken.principals, principal, slots / PRINCIPAL_SHARE)
            || full(&taken.namespaces, namespace, slots / NAMESPACE_SHARE)
        {
            return None;
        }
        let principal = hold(&mut taken.principals, principal);
        let namespace = hold(&mut taken.namespaces, namespace);
        Some(Share {
            of: self.clone(),
            principal,
            namespace,
        })
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        let mut taken = self.of.taken.lock().expect("shares lock");
        give_back(&mut taken.principals, &self.principal);
        give_back(&mut taken.namespaces, &self.namespace);
    }
}

/// Failed authentications by client address, in fixed windows.
pub(crate) struct AuthFailures {
    start: Instant,
    seen: Mutex<HashMap<IpAddr, (u64, u32)>>,
}

impl Default for AuthFailures {
    fn default() -> Self {
        Self {
            start: Instant::now(),
            seen: Mutex::default(),
        }
    }
}

impl AuthFailures {
    fn window(&self) -> u64 {
        self.start.elapsed().as_secs() / AUTH_FAILURE_WINDOW_SECS
    }

    /// Whether `ip` has used up its failures in the current window.
    pub(super) fn blocked(&self, ip: IpAddr) -> bool {
        let now = self.window();
        let seen = self.seen.lock().expect("failures lock");
        seen.get(&ip)
            .is_some_and(|(w, n)| *w == now && *n >= MAX_AUTH_FAILURES)
    }

    /// `ip` failed to authenticate once more.
    pub(super) fn failed(&self, ip: IpAddr) {
        let now = self.window();
        let mut seen = self.seen.lock().expect("failures lock");
        if seen.len() >= ADDRESSES_REMEMBERED {
            seen.retain(|_, (w, _)| *w == now);
        }
        let entry = seen.entry(ip).or_insert((now, 0));
        if entry.0 != now {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_principal_and_a_namespace_hold_their_part_and_give_it_back() {
        let shares = Arc::new(Shares::default());
        // 16 slots: 4 per principal, 8 per namespace.
        let alice: Vec<Share> = (0..4)
            .filter_map(|_| shares.take("alice", "a", 16))
            .collect();
        assert_eq!(alice.len(), 4);
        assert!(
            shares.take("alice", "a", 16).is_none(),
            "alice holds her part"
        );
        assert!(shares.take("alice", "b", 16).is_none(), "in any namespace");
        let bob: Vec<Share> = (0..4).filter_map(|_| shares.take("bob", "a", 16)).collect();
        assert_eq!(bob.len(), 4);
        assert!(
            shares.take("carol", "a", 16).is_none(),
            "namespace a holds its part"
        );
        assert!(shares.take("carol", "b", 16).is_some(), "b does not");
        drop(alice);
        assert!(shares.take("alice", "a", 16).is_some());
        drop(bob);
        assert!(
            shares.taken.lock().unwrap().is_empty(),
            "every share given back"
        );
        // A principal and a namespace of the same name are told apart.
        let same: Vec<Share> = (0..4).filter_map(|_| shares.take("x", "x", 16)).collect();
        assert_eq!(same.len(), 4);
        // A tiny endpoint still lets everyone in once.
        assert!(shares.take("dave", "c", 1).is_some());
    }

    #[test]
    fn an_address_that_keeps_failing_is_turned_away_until_the_window_ends() {
        let f = AuthFailures::default();
        let ip: IpAddr = "192.0.2.7".parse().unwrap();
        let other: IpAddr = "192.0.2.8".parse().unwrap();
        for _ in 0..MAX_AUTH_FAILURES {
            assert!(!f.blocked(ip));
            f.failed(ip);
        }
        assert!(f.blocked(ip));
        assert!(!f.blocked(other));
        // The next window starts afresh.
        f.seen.lock().unwrap().get_mut(&ip).unwrap().0 = u64::MAX;
        assert!(!f.blocked(ip));
    }
}
