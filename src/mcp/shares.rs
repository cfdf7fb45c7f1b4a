//! Fair shares of the endpoint: the requests one principal and one namespace may have in
//! progress at once (held calls and their streams included, until they end), and how many
//! failed authentications one client address may cause before it is turned away for a while.
//! Without them one token could hold every request slot, and random tokens each cost the
//! cluster a TokenReview.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

/// Of the endpoint's request slots, what one principal may hold: a quarter.
pub(super) const PRINCIPAL_SHARE: usize = 4;
/// Of the endpoint's request slots, what one namespace may hold: a half.
pub(super) const NAMESPACE_SHARE: usize = 2;
/// Failed authentications one client address may cause per window.
pub(super) const MAX_AUTH_FAILURES: u32 = 50;
/// The window failed authentications are counted in, from an address's first failure.
pub(super) const AUTH_FAILURE_WINDOW: Duration = Duration::from_secs(10);
/// Addresses remembered before those whose windows have ended are forgotten.
const ADDRESSES_REMEMBERED: usize = 10_000;

/// Requests in progress, by principal and by namespace. Every request takes a share and gives
/// it back, so the counters are atomics behind a lock taken only to add a name: a request in a
/// busy namespace neither copies a name nor waits for another request's lock (on a small
/// machine a preempted lock holder stalled the others).
#[derive(Default)]
pub(crate) struct Shares {
    principals: Counters,
    namespaces: Counters,
}

/// Requests in progress by name; names stay once counted (up to [`NAMES_KEPT`]).
#[derive(Default)]
struct Counters(RwLock<HashMap<Arc<str>, Arc<AtomicUsize>>>);

/// Names whose counters are kept; past it, the ones at zero are forgotten.
const NAMES_KEPT: usize = 10_000;

impl Counters {
    /// The counter of `name`.
    fn of(&self, name: &str) -> Arc<AtomicUsize> {
        if let Some(c) = self.0.read().expect("shares lock").get(name) {
            return c.clone();
        }
        let mut all = self.0.write().expect("shares lock");
        if all.len() >= NAMES_KEPT {
            all.retain(|_, c| c.load(Ordering::Acquire) > 0);
        }
        all.entry(Arc::from(name)).or_default().clone()
    }

    /// Count one more on `c` unless it is at `cap` already.
    fn take(c: &AtomicUsize, cap: usize) -> bool {
        c.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < cap).then_some(n + 1)
        })
        .is_ok()
    }

    #[cfg(test)]
    fn busy(&self) -> usize {
        let all = self.0.read().expect("shares lock");
        all.values().map(|c| c.load(Ordering::Acquire)).sum()
    }
}

/// What one request holds of [`Shares`]; given back when dropped (with the response body, so
/// a held call's stream keeps it to its end).
pub(crate) struct Share {
    principal: Arc<AtomicUsize>,
    namespace: Option<Arc<AtomicUsize>>,
}

impl Shares {
    /// A share for a request of `principal`, out of `slots` in all; `None` when the principal
    /// already holds its part. Its namespace is counted later ([`Shares::join`]).
    pub(super) fn take(&self, principal: &str, slots: usize) -> Option<Share> {
        let p = self.principals.of(principal);
        // Built only once counted: a `Share` dropped gives back what it holds.
        Counters::take(&p, (slots / PRINCIPAL_SHARE).max(1)).then(|| Share {
            principal: p,
            namespace: None,
        })
    }

    /// Count `share` in `namespace` as well; `false` when the namespace already holds its part
    /// of `slots`. A request is counted in a namespace only once its body is read: a caller
    /// with no rights there that trickles a body would otherwise hold the namespace's share.
    pub(super) fn join(&self, share: &mut Share, namespace: &str, slots: usize) -> bool {
        let n = self.namespaces.of(namespace);
        if !Counters::take(&n, (slots / NAMESPACE_SHARE).max(1)) {
            return false;
        }
        if let Some(old) = share.namespace.replace(n) {
            old.fetch_sub(1, Ordering::AcqRel);
        }
        true
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.principal.fetch_sub(1, Ordering::AcqRel);
        if let Some(n) = &self.namespace {
            n.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Failed authentications by client address, each address's counted in a window that opens
/// with its first failure: a boundary shared by every address would let one try twice the
/// limit across it, and would cut short the count of an address that began just before it.
#[derive(Default)]
pub(crate) struct AuthFailures {
    /// When each address's window opened and its failures in it. Read by every request,
    /// written only when one fails to authenticate.
    seen: RwLock<HashMap<IpAddr, (Instant, u32)>>,
}

impl AuthFailures {
    /// Whether `ip` has used up its failures in its window (the clock is read only for an
    /// address that has).
    pub(super) fn blocked(&self, ip: IpAddr) -> bool {
        let seen = self.seen.read().expect("failures lock");
        seen.get(&ip).is_some_and(|(opened, n)| {
            *n >= MAX_AUTH_FAILURES && opened.elapsed() < AUTH_FAILURE_WINDOW
        })
    }

    /// `ip` failed to authenticate once more.
    pub(super) fn failed(&self, ip: IpAddr) {
        let now = Instant::now();
        let open = |opened: &Instant| now.saturating_duration_since(*opened) < AUTH_FAILURE_WINDOW;
        let mut seen = self.seen.write().expect("failures lock");
        if seen.len() >= ADDRESSES_REMEMBERED {
            seen.retain(|_, (opened, _)| open(opened));
        }
        let entry = seen.entry(ip).or_insert((now, 0));
        if !open(&entry.0) {
            *entry = (now, 0);
        }
        entry.1 += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A share of `principal` counted in `namespace` too, as the gate takes it in two steps.
    fn take(shares: &Shares, principal: &str, namespace: &str, slots: usize) -> Option<Share> {
        let mut share = shares.take(principal, slots)?;
        shares.join(&mut share, namespace, slots).then_some(share)
    }

    #[test]
    fn a_principal_and_a_namespace_hold_their_part_and_give_it_back() {
        let shares = Shares::default();
        // 16 slots: 4 per principal, 8 per namespace.
        let alice: Vec<Share> = (0..4)
            .filter_map(|_| take(&shares, "alice", "a", 16))
            .collect();
        assert_eq!(alice.len(), 4);
        assert!(
            take(&shares, "alice", "a", 16).is_none(),
            "alice holds her part"
        );
        assert!(
            take(&shares, "alice", "b", 16).is_none(),
            "in any namespace"
        );
        let bob: Vec<Share> = (0..4)
            .filter_map(|_| take(&shares, "bob", "a", 16))
            .collect();
        assert_eq!(bob.len(), 4);
        assert!(
            take(&shares, "carol", "a", 16).is_none(),
            "namespace a holds its part"
        );
        assert!(take(&shares, "carol", "b", 16).is_some(), "b does not");
        drop(alice);
        assert!(take(&shares, "alice", "a", 16).is_some());
        drop(bob);
        assert_eq!(
            shares.principals.busy() + shares.namespaces.busy(),
            0,
            "every share given back"
        );
        // A principal and a namespace of the same name are told apart.
        let same: Vec<Share> = (0..4).filter_map(|_| take(&shares, "x", "x", 16)).collect();
        assert_eq!(same.len(), 4);
        // A tiny endpoint still lets everyone in once.
        assert!(take(&shares, "dave", "c", 1).is_some());
    }

    #[test]
    fn a_request_is_counted_in_its_namespace_only_once_it_joins() {
        let shares = Shares::default();
        // 8 slots: 2 per principal, 4 per namespace. Four requests not yet joined leave the
        // namespace free.
        let waiting: Vec<Share> = ["p", "q"]
            .iter()
            .flat_map(|p| [shares.take(p, 8), shares.take(p, 8)])
            .flatten()
            .collect();
        assert_eq!(waiting.len(), 4);
        let mine: Vec<Share> = (0..4)
            .filter_map(|i| take(&shares, &format!("u{i}"), "a", 8))
            .collect();
        assert_eq!(mine.len(), 4, "the namespace's part is whole");
        // A share that could not join gives back its principal's part all the same.
        assert!(take(&shares, "r", "a", 8).is_none());
        assert!(take(&shares, "r", "b", 8).is_some());
        drop((waiting, mine));
        assert_eq!(shares.principals.busy() + shares.namespaces.busy(), 0);
    }

    #[test]
    fn shares_taken_at_once_never_pass_the_cap_and_all_come_back() {
        let shares = Arc::new(Shares::default());
        let most = Arc::new(AtomicUsize::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (shares, most) = (shares.clone(), most.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        // 16 slots: 4 for the principal.
                        if let Some(share) = take(&shares, "alice", "a", 16) {
                            most.fetch_max(shares.principals.busy(), Ordering::SeqCst);
                            drop(share);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert!(most.load(Ordering::SeqCst) <= 4);
        assert_eq!(shares.principals.busy() + shares.namespaces.busy(), 0);
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
        // Once the window that opened with the first failure ends, the address may try again,
        // and its next failure opens a window of its own.
        let ended = Instant::now() - AUTH_FAILURE_WINDOW;
        f.seen.write().unwrap().get_mut(&ip).unwrap().0 = ended;
        assert!(!f.blocked(ip));
        f.failed(ip);
        assert!(!f.blocked(ip));
        assert_eq!(f.seen.read().unwrap()[&ip].1, 1);
    }
}
