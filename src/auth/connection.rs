//! The token a connection last signed in with, and who it was, while the authenticator's answer
//! lasts.
//!
//! An agent polls on one keep-alive connection with the same bearer token each time. Hashing a
//! ServiceAccount's JWT (about 1 KiB) to look it up costs more than the rest of finding its
//! identity; comparing it with the connection's last token costs a fraction of that. The copy
//! lives as long as the connection whose requests carried the token, and an identity is taken
//! from it only until the authenticator's own answer for that token expires: never longer than
//! a request that asks the authenticator would get it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use constant_time_eq::constant_time_eq;

use super::{Authenticator, Identity};

/// One connection's last signed-in token (one per accepted connection, shared by its requests).
#[derive(Default)]
pub struct LastToken(Mutex<Option<Last>>);

struct Last {
    /// Whose answer this is: a token one authenticator accepted proves nothing to another.
    by: Arc<dyn Authenticator>,
    token: Box<[u8]>,
    identity: Arc<Identity>,
    until: Instant,
}

impl LastToken {
    /// Who `token` signed in as with `by` on this connection, if it is the last token seen
    /// here and its answer has not expired by `now` (read only when a token is remembered:
    /// behind an authenticator that remembers nothing this costs no clock). An expired entry
    /// is forgotten, token and all.
    pub fn identity(
        &self,
        by: &Arc<dyn Authenticator>,
        token: &str,
        now: impl FnOnce() -> Instant,
    ) -> Option<Arc<Identity>> {
        let mut last = self.0.lock().expect("last token lock");
        let l = last.as_ref()?;
        if now() >= l.until {
            *last = None;
            return None;
        }
        (Arc::ptr_eq(&l.by, by) && constant_time_eq(&l.token, token.as_bytes()))
            .then(|| Arc::clone(&l.identity))
    }

    /// Remember that `token` signs in with `by` as `identity` until `until` (the answer's
    /// expiry), in place of whatever this connection remembered before.
    pub fn remember(
        &self,
        by: &Arc<dyn Authenticator>,
        token: &str,
        identity: Arc<Identity>,
        until: Instant,
    ) {
        *self.0.lock().expect("last token lock") = Some(Last {
            by: Arc::clone(by),
            token: token.as_bytes().into(),
            identity,
            until,
        });
    }

    /// Whether anything is remembered (what a test of forgetting reads).
    #[cfg(test)]
    fn holds_any(&self) -> bool {
        self.0.lock().expect("last token lock").is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Principal;
    use crate::auth::NoAuth;
    use std::time::Duration;

    fn someone(name: &str) -> Arc<Identity> {
        Arc::new(Identity {
            principal: Principal {
                username: name.into(),
                uid: None,
                groups: vec![],
            },
            namespace: Some("team-a".into()),
            extra: Default::default(),
        })
    }

    fn authenticator() -> Arc<dyn Authenticator> {
        Arc::new(NoAuth::new("team-a".into()))
    }

    #[test]
    fn the_last_token_answers_until_its_answer_expires_then_is_forgotten() {
        let (last, by) = (LastToken::default(), authenticator());
        let now = Instant::now();
        let at = |secs| move || now + Duration::from_secs(secs);
        assert!(last.identity(&by, "t", at(0)).is_none(), "nothing seen yet");
        let alice = someone("alice");
        last.remember(&by, "t", Arc::clone(&alice), now + Duration::from_secs(10));
        let got = last.identity(&by, "t", at(9)).unwrap();
        assert!(Arc::ptr_eq(&got, &alice));
        assert!(last.identity(&by, "u", at(0)).is_none(), "another token");
        assert!(last.identity(&by, "tt", at(0)).is_none(), "a longer token");
        assert!(last.identity(&by, "", at(0)).is_none(), "an empty token");
        assert!(last.holds_any(), "another token does not make it forget");
        assert!(
            last.identity(&by, "t", at(10)).is_none(),
            "expired with the authenticator's answer"
        );
        assert!(!last.holds_any(), "an expired token is not kept");
    }

    #[test]
    fn only_the_authenticator_that_answered_is_taken_at_its_word() {
        let (last, by, other) = (LastToken::default(), authenticator(), authenticator());
        let now = Instant::now();
        last.remember(&by, "t", someone("alice"), now + Duration::from_secs(10));
        assert!(last.identity(&other, "t", || now).is_none());
        assert!(last.identity(&by, "t", || now).is_some());
    }

    #[test]
    fn a_new_token_replaces_the_last_and_a_renewal_extends_it() {
        let (last, by) = (LastToken::default(), authenticator());
        let now = Instant::now();
        last.remember(&by, "t", someone("alice"), now + Duration::from_secs(10));
        last.remember(&by, "u", someone("bob"), now + Duration::from_secs(10));
        assert!(
            last.identity(&by, "t", || now).is_none(),
            "only the last token is kept"
        );
        let bob = last.identity(&by, "u", || now).unwrap();
        assert_eq!(bob.principal.username, "bob");
        last.remember(&by, "u", someone("bob"), now + Duration::from_secs(20));
        assert!(
            last.identity(&by, "u", || now + Duration::from_secs(15))
                .is_some()
        );
    }
}
