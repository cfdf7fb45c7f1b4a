//! What one thread has lately learned from the shared review caches: a few tokens (by the same
//! hash the shared cache keys them by, never the token itself), each with this thread's own copy
//! of its identity and the access decisions asked about that copy.
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
/// Decisions remembered per token.
const DECISIONS: usize = 8;

/// A fresh owner number: each authenticator's entries answer only for it.
pub(super) fn next_owner() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// One thread's memo.
#[derive(Default)]
pub(super) struct Memo {
    tokens: VecDeque<Token>,
}

struct Token {
    owner: u64,
    /// The token's hash.
    token: TokenKey,
    /// When the shared cache got this answer.
    at: Instant,
    /// This thread's copy (`None`: the token was rejected).
    identity: Option<Arc<Identity>>,
    decisions: VecDeque<Decision>,
}

struct Decision {
    verb: Verb,
    resource: Resource,
    namespace: Box<str>,
    at: Instant,
    allowed: bool,
}

/// The question an access decision answers.
#[derive(Clone, Copy)]
pub(super) struct Question<'a> {
    /// Who asks: the decision is remembered only for an identity this memo handed out.
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
    /// The identity remembered for `token` (`Some(None)`: rejected), if still fresh.
    pub(super) fn identity(
        &self,
        owner: u64,
        token: &TokenKey,
        now: Instant,
        ttl: Duration,
    ) -> Option<Option<Arc<Identity>>> {
        self.tokens
            .iter()
            .find(|t| t.is(owner, token))
            .filter(|t| fresh(t.at, now, ttl))
            .map(|t| t.identity.clone())
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
            decisions: VecDeque::new(),
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
        self.tokens
            .iter()
            .find(|t| t.holds(owner, q.who))?
            .decisions
            .iter()
            .find(|d| d.answers(q))
            .filter(|d| fresh(d.at, now, ttl))
            .map(|d| d.allowed)
    }

    /// Remember the shared cache's decision for `q`, got at `at`, when `q.who` is an identity
    /// this memo handed out (any other may be a different principal at the same address).
    pub(super) fn remember_decision(
        &mut self,
        owner: u64,
        q: Question<'_>,
        at: Instant,
        allowed: bool,
    ) {
        let Some(t) = self.tokens.iter_mut().find(|t| t.holds(owner, q.who)) else {
            return;
        };
        t.decisions.retain(|d| !d.answers(q));
        if t.decisions.len() >= DECISIONS {
            t.decisions.pop_front();
        }
        t.decisions.push_back(Decision {
            verb: q.verb,
            resource: q.resource,
            namespace: q.namespace.into(),
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

    /// Whether this entry's identity is `who` itself. The entry holds that identity, so no
    /// other can be at its address while the entry lives.
    fn holds(&self, owner: u64, who: &Identity) -> bool {
        self.owner == owner
            && self
                .identity
                .as_ref()
                .is_some_and(|i| std::ptr::eq(Arc::as_ptr(i), who))
    }
}

impl Decision {
    /// Whether this decision answers `q`'s verb, resource and namespace.
    fn answers(&self, q: Question<'_>) -> bool {
        self.verb == q.verb && self.resource == q.resource && &*self.namespace == q.namespace
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
        let again = m
            .identity(1, &key("t"), at + TTL / 2, TTL)
            .unwrap()
            .unwrap();
        assert!(Arc::ptr_eq(&given, &again), "the same copy each time");
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
        assert_eq!(
            m.identity(1, &key("bad"), at, TTL),
            Some(None),
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
    fn a_decision_answers_only_its_question_for_the_identity_handed_out() {
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
        assert_eq!(m.decision(2, get_runs(&given, "team-a"), at, TTL), None);
        assert_eq!(
            m.decision(1, get_runs(&given, "team-a"), at + TTL, TTL),
            None,
            "expired with the shared answer"
        );
        // An equal identity that this memo did not hand out is another caller as far as the
        // memo knows: neither answered nor remembered.
        let twin = alice();
        assert_eq!(m.decision(1, get_runs(&twin, "team-a"), at, TTL), None);
        m.remember_decision(1, get_runs(&twin, "team-b"), at, true);
        assert_eq!(m.decision(1, get_runs(&given, "team-b"), at, TTL), None);
    }

    #[test]
    fn decisions_are_bounded_per_token_and_go_with_it() {
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
        // The token's new answer is a new copy: the old copy's decisions are not its.
        let renewed = m
            .remember_identity(1, &key("t"), at, Some(&alice()))
            .unwrap();
        assert_eq!(m.decision(1, get_runs(&renewed, "ns-1"), at, TTL), None);
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
