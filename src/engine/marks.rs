//! Seals on what Runway creates itself: child Runs, scheduled Runs and Jobs carry an HMAC,
//! under the server's state key, of who they are and of the markers Runway acts on (parent,
//! root, depth, schedule, time). Names and labels can be chosen by anyone who may create
//! objects in the namespace; a seal cannot, so Runway adopts, counts, cancels and prunes only
//! objects whose seal holds.

use hmac::{KeyInit, Mac};
use sha2::Sha256;

/// What a seal is about, so that a seal of one kind never passes for another.
#[derive(Debug, Clone, Copy)]
pub enum Sealed {
    /// A child Run: namespace, name, parent uid, root uid, depth, lineage.
    Child,
    /// A scheduled Run: namespace, name, Workflow, schedule, time.
    Scheduled,
    /// A Job of a `job` step: namespace, name, Run uid, step record.
    Job,
}

impl Sealed {
    fn tag(self) -> &'static str {
        match self {
            Self::Child => "child-run",
            Self::Scheduled => "scheduled-run",
            Self::Job => "job",
        }
    }
}

/// The keys seals are made and checked with: the first makes them, any opens them (so a
/// rotated key keeps the objects sealed under the one before).
#[derive(Debug, Clone, Default)]
pub struct Marks {
    keys: std::sync::Arc<Vec<Vec<u8>>>,
}

impl Marks {
    /// Seals under `keys`, newest first. Without keys nothing is ever sealed or trusted.
    pub fn new(keys: Vec<Vec<u8>>) -> Self {
        Self {
            keys: std::sync::Arc::new(keys.into_iter().filter(|k| !k.is_empty()).collect()),
        }
    }

    fn mac(key: &[u8], what: Sealed, parts: &[&str]) -> hmac::Hmac<Sha256> {
        let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
        mac.update(what.tag().as_bytes());
        for part in parts {
            mac.update(&[0]);
            mac.update(part.as_bytes());
        }
        mac
    }

    /// The seal of `parts` as `what` (empty without keys).
    pub fn seal(&self, what: Sealed, parts: &[&str]) -> String {
        match self.keys.first() {
            Some(key) => data_encoding::BASE32_NOPAD
                .encode(&Self::mac(key, what, parts).finalize().into_bytes())
                .to_lowercase(),
            None => String::new(),
        }
    }

    /// Whether `mark` is a seal of `parts` as `what` under one of the keys.
    pub fn verify(&self, what: Sealed, parts: &[&str], mark: Option<&str>) -> bool {
        let Some(bytes) = mark
            .map(str::to_uppercase)
            .and_then(|m| data_encoding::BASE32_NOPAD.decode(m.as_bytes()).ok())
        else {
            return false;
        };
        self.keys
            .iter()
            .any(|key| Self::mac(key, what, parts).verify_slice(&bytes).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seal_holds_only_for_its_parts_its_kind_and_its_keys() {
        let old = Marks::new(vec![b"old-key".to_vec()]);
        let new = Marks::new(vec![b"new-key".to_vec(), b"old-key".to_vec()]);
        let parts = ["team-a", "run-1", "uid-1"];
        let seal = old.seal(Sealed::Child, &parts);
        assert!(old.verify(Sealed::Child, &parts, Some(&seal)));
        assert!(
            new.verify(Sealed::Child, &parts, Some(&seal)),
            "rotated key"
        );
        assert!(
            !old.verify(Sealed::Job, &parts, Some(&seal)),
            "another kind"
        );
        assert!(!old.verify(Sealed::Child, &["team-a", "run-1", "uid-2"], Some(&seal)));
        // Parts are delimited: moving a character between them breaks the seal.
        assert!(!old.verify(Sealed::Child, &["team-a", "run-1u", "id-1"], Some(&seal)));
        assert!(!old.verify(Sealed::Child, &parts, None));
        assert!(!old.verify(Sealed::Child, &parts, Some("forged")));
        assert!(!old.verify(Sealed::Child, &parts, Some("")));
        let none = Marks::default();
        assert_eq!(none.seal(Sealed::Child, &parts), "");
        assert!(!none.verify(Sealed::Child, &parts, Some("")));
        assert!(!Marks::new(vec![b"other".to_vec()]).verify(Sealed::Child, &parts, Some(&seal)));
    }
}
