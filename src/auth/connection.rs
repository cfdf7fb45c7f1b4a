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

use super::Identity;
use super::compare::constant_time_eq;

/// One connection's last signed-in token (one per accepted connection, shared by its requests).
#[derive(Default)]
pub struct LastToken(Mutex<Option<Last>>);

struct Last {
    token: Box<[u8]>,
    identity: Arc<Identity>,
    until: Instant,
}

impl LastToken {
    /// Who `token` signed in as on this connection, if it is the last token seen here and its
    /// answer has not expired by `now` (read only when a token is remembered: behind an
    /// authenticator that remembers nothing this costs no clock).
    pub fn identity(&self, token: &str, now: impl FnOnce() -> Instant) -> Option<Arc<Identity>> {
        let last = self.0.lock().expect("last token lock");
        last.as_ref()
            .filter(|l| now() < l.until && constant_time_eq(&l.token, token.as_bytes()))
            .map(|l| Arc::clone(&l.identity))
    }

    /// Remember that `token` signs in as `identity` until `until` (the authenticator's answer's
    /// expiry), in place of the previous token.
    pub fn remember(&self, token: &str, identity: Arc<Identity>, until: Instant) {
        let mut last = self.0.lock().expect("last token lock");
        match last.as_mut() {
            // The same token again: its buffer is reused.
            Some(l) if constant_time_eq(&l.token, token.as_bytes()) => {
                l.identity = identity;
                l.until = until;
            }
            _ => {
                *last = Some(Last {
                    token: token.as_bytes().into(),
                    identity,
                    until,
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Principal;
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

    #[test]
    fn the_last_token_answers_until_its_answer_expires() {
        let last = LastToken::default();
        let now = Instant::now();
        assert!(last.identity("t", || now).is_none(), "nothing seen yet");
        let alice = someone("alice");
        last.remember("t", Arc::clone(&alice), now + Duration::from_secs(10));
        let got = last.identity("t", || now + Duration::from_secs(9)).unwrap();
        assert!(Arc::ptr_eq(&got, &alice));
        assert!(
            last.identity("t", || now + Duration::from_secs(10))
                .is_none(),
            "expired with the authenticator's answer"
        );
        assert!(last.identity("u", || now).is_none(), "another token");
        assert!(last.identity("tt", || now).is_none(), "a longer token");
        assert!(last.identity("", || now).is_none(), "an empty token");
    }

    #[test]
    fn a_new_token_replaces_the_last_and_a_renewal_extends_it() {
        let last = LastToken::default();
        let now = Instant::now();
        last.remember("t", someone("alice"), now + Duration::from_secs(10));
        last.remember("u", someone("bob"), now + Duration::from_secs(10));
        assert!(
            last.identity("t", || now).is_none(),
            "only the last token is kept"
        );
        assert_eq!(
            last.identity("u", || now).unwrap().principal.username,
            "bob"
        );
        last.remember("u", someone("bob"), now + Duration::from_secs(20));
        assert!(
            last.identity("u", || now + Duration::from_secs(15))
                .is_some()
        );
    }
}
