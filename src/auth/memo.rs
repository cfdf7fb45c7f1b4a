//! What one thread has lately learned from the shared review caches: a few tokens (by the same
//! hash the shared cache keys them by, never the token itself), each with this thread's own copy
//! of its identity, and the access decisions lately asked, by who asked (the identity's
//! content, which is all a SubjectAccessReview is told).
//!
//! A lookup in the shared caches writes memory every core reads (the map's lock word, the
//! identity's reference count) and hashes the question; here a repeated caller costs a
//! comparison or two on lines no other core touches. An entry is trusted exactly as long as
//! the shared answer it copies: until `ttl` after the shared cache got that answer.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::{Identity, Resource, Verb};

/// A token's SHA-256.
pub(super) type TokenKey = [u8; 32];

/// Tokens one thread remembers; a new one pushes out the one seen longest ago.
const TOKENS: usize = 4;
/// Decisions one thread remembers, for every caller together.
const DECISIONS: usize = 32;

/// A fresh owner number: each authenticator's entries answer only for it.
pub(super) fn next_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One thread's memo.
#[derive(Default)]
pub(super) struct Memo {
    tokens: VecDeque<Token>,
    decisions: VecDeque<Decision>,
}

struct Token {
    owner: u64,
    /// The token's hash.
    token: TokenKey,
    /// When the shared cache got this answer.
    at: Instant,
    /// This thread's copy (`None`: the token was rejected).
    identity: Option<Arc<Identity>>,
}

struct Decision {
    owner: u64,
    verb: Verb,
    resource: Resource,
    namespace: Box<str>,
    /// Who asked. By content, not by the copy a token lookup handed out: a connection that
    /// signed its caller in on another thread brings that thread's copy.
    who: Identity,
    at: Instant,
    allowed: bool,
}

/// The question an access decision answers.
#[derive(Clone, Copy)]
pub(super) struct Question<'a> {
    /// Who asks.
    pub who: &'a Identity,
    /// The verb.
    pub verb: Verb,
    /// The resource.
    pub resource: Resource,
    /// The namespace.
    pub namespace: &'a str,
}

fn fresh(at: Instant, now: Instant, ttl: Duration) -> bool {
    now.saturating_duration_since(at) < ttl
}

impl Memo {
    /// The identity remembered for `token` (`None` inside: rejected), if still fresh, and
    /// when the shared cache got that answer.
    pub(super) fn identity(
        &self,
        owner: u64,
        token: &TokenKey,
        now: Instant,
        ttl: Duration,
    ) -> Option<(Option<Arc<Identity>>, Instant)> {
        self.tokens
            .iter()
            .find(|t| t.is(owner, token))
            .filter(|t| fresh(t.at, now, ttl))
            .map(|t| (t.identity.clone(), t.at))
    }

    /// Remember the shared cache's answer for `token`, got at `at`; the identity to hand out:
    /// this thread's own copy.
    pub(super) fn remember_identity(
        &mut self,
        owner: u64,
        token: &TokenKey,
        at: Instant,
        identity: Option<&Identity>,
    ) -> Option<Arc<Identity>> {
        self.tokens.retain(|t| !t.is(owner, token));
        if self.tokens.len() >= TOKENS {
            self.tokens.pop_front();
        }
        let identity = identity.map(|i| Arc::new(i.clone()));
        self.tokens.push_back(Token {
            owner,
            token: *token,
            at,
            identity: identity.clone(),
        });
        identity
    }

    /// The decision remembered for `q`, if still fresh.
    pub(super) fn decision(
        &self,
        owner: u64,
        q: Question<'_>,
        now: Instant,
        ttl: Duration,
    ) -> Option<bool> {
        self.decisions
            .iter()
            .find(|d| d.answers(owner, q))
            .filter(|d| fresh(d.at, now, ttl))
            .map(|d| d.allowed)
    }

    /// Remember the shared cache's decision for `q`, got at `at`.
    pub(super) fn remember_decision(
        &mut self,
        owner: u64,
        q: Question<'_>,
        at: Instant,
        allowed: bool,
    ) {
        self.decisions.retain(|d| !d.answers(owner, q));
        if self.decisions.len() >= DECISIONS {
            self.decisions.pop_front();
        }
        self.decisions.push_back(Decision {
            owner,
            verb: q.verb,
            resource: q.resource,
            namespace: q.namespace.into(),
            who: q.who.clone(),
            at,
            allowed,
        });
    }
}

impl Token {
    /// Whether this entry is `owner`'s for the token hashed to `token`.
    fn is(&self, owner: u64, token: &TokenKey) -> bool {
        self.owner == owner && &self.token == token
    }
}

impl Decision {
    /// Whether this is `owner`'s decision for `q`: its verb, resource, namespace and who asks
    /// (the cheap comparisons first; the identity's starts with the user name).
    fn answers(&self, owner: u64, q: Question<'_>) -> bool {
        self.owner == owner
            && self.verb == q.verb
            && self.resource == q.resource
            && &*self.namespace == q.namespace
            && self.who == *q.who
    }
}

thread_local! {
    static MEMO: RefCell<Memo> = RefCell::new(Memo::default());
}

/// Run `f` on this thread's memo.
pub(super) fn with<T>(f: impl FnOnce(&mut Memo) -> T) -> T {
    MEMO.with(|m| f(&mut m.borrow_mut()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Principal;

    const TTL: Duration = Duration::from_secs(10);

    fn key(token: &str) -> TokenKey {
        let mut k = [0; 32];
        k[..token.len()].copy_from_slice(token.as_bytes());
        k
    }

    fn alice() -> Identity {
        Identity {
            principal: Principal {
                username: "alice".into(),
                uid: None,
                groups: vec!["devs".into()],
            },
            namespace: Some("team-a".into()),
            extra: Default::default(),
        }
    }

    /// A memo that has just remembered alice for token `t` (owner 1): the memo, when, and the
    /// copy it handed out.
    fn alice_remembered() -> (Memo, Instant, Arc<Identity>) {
        let mut m = Memo::default();
        let at = Instant::now();
        let given = m
            .remember_identity(1, &key("t"), at, Some(&alice()))
            .unwrap();
        (m, at, given)
    }

    fn get_runs<'a>(who: &'a Identity, namespace: &'a str) -> Question<'a> {
        Question {
            who,
            verb: Verb::Get,
            resource: Resource::Runs,
            namespace,
        }
    }

    #[test]
    fn a_token_is_answered_until_its_shared_answer_expires() {
        let (mut m, at, given) = alice_remembered();
        let (again, got_at) = m.identity(1, &key("t"), at + TTL / 2, TTL).unwrap();
        let again = again.unwrap();
        assert!(Arc::ptr_eq(&given, &again), "the same copy each time");
        assert_eq!(got_at, at, "when the shared cache got the answer");
        assert_eq!(again.principal.username, "alice");
        assert!(
            m.identity(1, &key("t"), at + TTL, TTL).is_none(),
            "expired with the shared answer"
        );
        assert!(m.identity(1, &key("u"), at, TTL).is_none(), "another token");
        assert!(
            m.identity(2, &key("t"), at, TTL).is_none(),
            "another authenticator"
        );
        assert!(m.remember_identity(1, &key("bad"), at, None).is_none());
        assert!(
            matches!(m.identity(1, &key("bad"), at, TTL), Some((None, _))),
            "a rejection is remembered"
        );
    }

    #[test]
    fn the_oldest_token_makes_room() {
        let mut m = Memo::default();
        let at = Instant::now();
        for t in 0..=TOKENS {
            m.remember_identity(1, &key(&t.to_string()), at, Some(&alice()));
        }
        assert!(m.identity(1, &key("0"), at, TTL).is_none());
        assert!(m.identity(1, &key(&TOKENS.to_string()), at, TTL).is_some());
        // Remembering a token again replaces its entry instead of adding one.
        m.remember_identity(1, &key("1"), at, Some(&alice()));
        assert!(m.identity(1, &key("2"), at, TTL).is_some());
    }

    #[test]
    fn a_decision_answers_only_its_question_for_the_same_caller() {
        let (mut m, at, given) = alice_remembered();
        m.remember_decision(1, get_runs(&given, "team-a"), at, true);
        assert_eq!(
            m.decision(1, get_runs(&given, "team-a"), at, TTL),
            Some(true)
        );
        assert_eq!(m.decision(1, get_runs(&given, "team-b"), at, TTL), None);
        let update = Question {
            verb: Verb::Update,
            ..get_runs(&given, "team-a")
        };
        assert_eq!(m.decision(1, update, at, TTL), None);
        let workflows = Question {
            resource: Resource::Workflows,
            ..get_runs(&given, "team-a")
        };
        assert_eq!(m.decision(1, workflows, at, TTL), None);
        assert_eq!(
            m.decision(1, get_runs(&given, "team-a"), at, TTL),
            Some(true)
        );
        assert_eq!(m.decision(2, get_runs(&given, "team-a"), at, TTL), None);
        assert_eq!(
            m.decision(1, get_runs(&given, "team-a"), at + TTL, TTL),
            None,
            "expired with the shared answer"
        );
        // The same caller by another copy (signed in on another thread) is answered; anything
        // a review is told that differs — the name, a group, an extra — is another caller.
        assert_eq!(
            m.decision(1, get_runs(&alice(), "team-a"), at, TTL),
            Some(true)
        );
        let mut bob = alice();
        bob.principal.username = "bob".into();
        let mut ops = alice();
        ops.principal.groups.push("ops".into());
        let mut scoped = alice();
        scoped
            .extra
            .insert("scopes".into(), vec!["runs:read".into()]);
        for other in [&bob, &ops, &scoped] {
            assert_eq!(m.decision(1, get_runs(other, "team-a"), at, TTL), None);
        }
        m.remember_decision(1, get_runs(&bob, "team-a"), at, false);
        assert_eq!(
            m.decision(1, get_runs(&bob, "team-a"), at, TTL),
            Some(false)
        );
        assert_eq!(
            m.decision(1, get_runs(&given, "team-a"), at, TTL),
            Some(true)
        );
    }

    #[test]
    fn decisions_are_bounded_and_outlive_a_token_renewal() {
        let (mut m, at, given) = alice_remembered();
        let namespaces: Vec<String> = (0..=DECISIONS).map(|i| format!("ns-{i}")).collect();
        for ns in &namespaces {
            m.remember_decision(1, get_runs(&given, ns), at, true);
        }
        assert_eq!(m.decision(1, get_runs(&given, "ns-0"), at, TTL), None);
        assert_eq!(
            m.decision(1, get_runs(&given, &namespaces[DECISIONS]), at, TTL),
            Some(true)
        );
        // A decision is about who asks, not about the token: a renewed token's caller is the
        // same, and the decision lasts as long as its own shared answer.
        let renewed = m
            .remember_identity(1, &key("t"), at, Some(&alice()))
            .unwrap();
        assert_eq!(
            m.decision(1, get_runs(&renewed, "ns-1"), at, TTL),
            Some(true)
        );
        // Asked again, a question keeps one entry.
        m.remember_decision(1, get_runs(&renewed, "ns-1"), at, false);
        assert_eq!(m.decisions.len(), DECISIONS);
        assert_eq!(
            m.decision(1, get_runs(&given, "ns-1"), at, TTL),
            Some(false)
        );
    }

    #[test]
    fn each_thread_has_its_own_memo() {
        let at = Instant::now();
        with(|m| m.remember_identity(7, &key("t"), at, Some(&alice())));
        assert!(with(|m| m.identity(7, &key("t"), at, TTL)).is_some());
        let elsewhere =
            std::thread::spawn(move || with(|m| m.identity(7, &key("t"), at, TTL).is_some()))
                .join()
                .unwrap();
        assert!(!elsewhere);
    }
}
