//! The newest versions of Runs a replica knows of before its reflector does: the answers to its
//! own writes and what its watches delivered, each trusted for a short while.
//!
//! A watch delivers every write of every Run, and a replica that nobody lists or scrapes would
//! keep each one until the Run is deleted if only reads forgot them: the versions are shared
//! with whoever else holds them (the watch's consumers, the writer's caller), and the expired
//! ones are swept out as new ones come, at a cost that does not grow with the Runs held.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use crate::api::ObjectKey as Key;
use crate::api::Run;

/// Fewest entries held before the expired ones are swept out.
const SWEEP_FLOOR: usize = 256;

/// A Run's resource version as a number (the API server's are decimal).
pub(super) fn rv_num(run: &Run) -> Option<u64> {
    run.metadata.resource_version.as_deref()?.parse().ok()
}

/// What a replica knows of one Run beside its reflector.
pub(super) enum Known {
    /// Nothing newer than the reflector.
    Nothing,
    /// A version written or watched moments ago.
    Version(Arc<Run>),
    /// The Run of this uid was deleted moments ago.
    Deleted(String),
}

/// Recently written or watched versions, by key; read by every get under a read lock.
pub(super) struct Recent {
    ttl: Duration,
    held: RwLock<Held>,
}

struct Held {
    by_key: HashMap<Key, (Instant, Arc<Run>)>,
    /// The uids of Runs deleted: a version of one delivered late (by a slower watch, or the
    /// answer of a write that crossed the delete) is of a Run that is gone, and so is the
    /// reflector's copy until the reflector sees the delete.
    gone: HashMap<Key, (Instant, String)>,
    /// Size at which the next sweep runs: twice what the last one left.
    sweep_at: usize,
}

impl Held {
    /// Drop what is older than `ttl` once the maps have doubled since the last sweep.
    fn sweep_if_due(&mut self, ttl: Duration) {
        if self.by_key.len() + self.gone.len() >= self.sweep_at {
            self.by_key.retain(|_, (at, _)| at.elapsed() < ttl);
            self.gone.retain(|_, (at, _)| at.elapsed() < ttl);
            self.sweep_at = ((self.by_key.len() + self.gone.len()) * 2).max(SWEEP_FLOOR);
        }
    }
}

impl Recent {
    /// Versions trusted for `ttl` after they were remembered.
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            held: RwLock::new(Held {
                by_key: HashMap::new(),
                gone: HashMap::new(),
                sweep_at: SWEEP_FLOOR,
            }),
        }
    }

    /// Keep `run` as the newest known version of its object unless a newer one is known already.
    pub(super) fn remember(&self, run: &Arc<Run>) {
        let Some(key) = Key::of(&run.metadata) else {
            return;
        };
        let mut held = self.held.write().expect("recent lock");
        let ttl = self.ttl;
        let newer =
            held.by_key
                .get(&key)
                .is_none_or(|(_, known)| match (rv_num(known), rv_num(run)) {
                    (Some(a), Some(b)) => b >= a,
                    _ => true,
                });
        let deleted = held
            .gone
            .get(&key)
            .is_some_and(|(at, uid)| at.elapsed() < ttl && run.metadata.uid.as_ref() == Some(uid));
        if newer && !deleted {
            held.by_key.insert(key, (Instant::now(), Arc::clone(run)));
        }
        held.sweep_if_due(ttl);
    }

    /// What is known of `namespace`/`name` and not yet expired.
    pub(super) fn get(&self, namespace: &str, name: &str) -> Known {
        let held = self.held.read().expect("recent lock");
        // Most reads find nothing remembered: no key to build.
        if held.by_key.is_empty() && held.gone.is_empty() {
            return Known::Nothing;
        }
        let key = Key::new(namespace, name);
        let fresh = |at: &Instant| at.elapsed() < self.ttl;
        if let Some((_, run)) = held.by_key.get(&key).filter(|(at, _)| fresh(at)) {
            return Known::Version(Arc::clone(run));
        }
        match held.gone.get(&key).filter(|(at, _)| fresh(at)) {
            Some((_, uid)) => Known::Deleted(uid.clone()),
            None => Known::Nothing,
        }
    }

    /// The uids of the Runs deleted and not yet expired, by key.
    pub(super) fn gone(&self) -> HashMap<Key, String> {
        let held = self.held.read().expect("recent lock");
        held.gone
            .iter()
            .filter(|(_, (at, _))| at.elapsed() < self.ttl)
            .map(|(k, (_, uid))| (k.clone(), uid.clone()))
            .collect()
    }

    /// Every version not yet expired (the expired ones are dropped).
    pub(super) fn fresh(&self) -> Vec<Arc<Run>> {
        let mut held = self.held.write().expect("recent lock");
        let ttl = self.ttl;
        held.by_key.retain(|_, (at, _)| at.elapsed() < ttl);
        held.gone.retain(|_, (at, _)| at.elapsed() < ttl);
        held.by_key.values().map(|(_, r)| Arc::clone(r)).collect()
    }

    /// `key` was deleted (the Run of `uid`, when the API server said which, at `version` when
    /// known): forget it, and take any version of that Run that comes later for what it is,
    /// gone. A version of another uid written after the delete is of a Run created again
    /// under the name, which a slower watch's word of the old one's delete does not end.
    pub(super) fn deleted(&self, key: &Key, uid: Option<&str>, version: Option<u64>) {
        let mut held = self.held.write().expect("recent lock");
        let other_run = |(_, r): &(Instant, Arc<Run>)| {
            let later = version.is_none_or(|v| rv_num(r).is_some_and(|rv| rv > v));
            later && uid.is_some_and(|uid| r.metadata.uid.as_deref().is_some_and(|u| u != uid))
        };
        if !held.by_key.get(key).is_some_and(other_run) {
            held.by_key.remove(key);
        }
        if let Some(uid) = uid {
            held.gone
                .insert(key.clone(), (Instant::now(), uid.to_owned()));
        }
        held.sweep_if_due(self.ttl);
    }

    /// The cache holds version `cached` of the Run: forget a remembered version no newer.
    pub(super) fn forget_caught_up(&self, key: Key, cached: u64) {
        self.forget_if(key, |_, r| rv_num(r).is_none_or(|now| now <= cached));
    }

    /// Neither the cache nor the API server has the Run: forget a remembered version only if it
    /// had expired (one remembered since the read looked is a create the cache has not seen yet).
    pub(super) fn forget_expired(&self, key: Key) {
        let ttl = self.ttl;
        self.forget_if(key, |at, _| at.elapsed() >= ttl);
    }

    /// Drop the remembered version if `stale` says so of what is remembered *now*. A reader
    /// decides to forget after looking, and between its look and the forget a watch event or a
    /// write's answer may have remembered a newer version; removing that one unchecked sent
    /// reads back to a cache that had not seen it (a concurrency verdict made on such a read
    /// held a queued Run behind a peer that had already finished).
    fn forget_if(&self, key: Key, stale: impl FnOnce(&Instant, &Run) -> bool) {
        let mut held = self.held.write().expect("recent lock");
        if held.by_key.get(&key).is_some_and(|(at, r)| stale(at, r)) {
            held.by_key.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use jiff::Timestamp;
    use serde_json::Value;

    use super::*;

    fn version(name: &str, rv: u64) -> Arc<Run> {
        let mut r = Run::requested("ns", name, "w", Value::Null, None, Timestamp::UNIX_EPOCH);
        r.metadata.resource_version = Some(rv.to_string());
        r.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(r)
    }

    fn remembered(recent: &Recent) -> Option<u64> {
        match recent.get("ns", "r") {
            Known::Version(r) => rv_num(&r),
            _ => None,
        }
    }

    const LONG: Duration = Duration::from_secs(3600);

    #[test]
    fn a_reader_forgets_only_what_the_cache_has_caught_up_with() {
        let recent = Recent::new(LONG);
        recent.remember(&version("r", 717));
        // A reader saw 717 remembered and 717 cached; before it forgets, the watch delivers 718.
        recent.remember(&version("r", 718));
        recent.forget_caught_up(Key::new("ns", "r"), 717);
        assert_eq!(remembered(&recent), Some(718), "the newer version stays");
        // Once the cache holds 718 it is forgotten.
        recent.forget_caught_up(Key::new("ns", "r"), 718);
        assert_eq!(remembered(&recent), None);
        // An older version never replaces a newer one.
        recent.remember(&version("r", 720));
        recent.remember(&version("r", 719));
        assert_eq!(remembered(&recent), Some(720));
    }

    #[test]
    fn a_missing_run_forgets_only_an_expired_entry() {
        let recent = Recent::new(LONG);
        // Created and remembered after the read that found nothing asked the API server.
        recent.remember(&version("r", 5));
        recent.forget_expired(Key::new("ns", "r"));
        assert_eq!(remembered(&recent), Some(5));
        let expired = Recent::new(Duration::ZERO);
        expired.remember(&version("r", 5));
        expired.forget_expired(Key::new("ns", "r"));
        assert!(expired.held.read().unwrap().by_key.is_empty());
    }

    #[test]
    fn expired_versions_are_swept_out_without_a_reader() {
        // A watch delivering a thousand Runs to a replica that nobody reads from.
        let expired = Recent::new(Duration::ZERO);
        for i in 0..1000 {
            expired.remember(&version(&format!("r{i}"), i));
        }
        assert!(expired.held.read().unwrap().by_key.len() < SWEEP_FLOOR);
        assert!(expired.fresh().is_empty());
        // Fresh versions are all kept, however many.
        let fresh = Recent::new(LONG);
        for i in 0..1000 {
            fresh.remember(&version(&format!("r{i}"), i));
        }
        assert_eq!(fresh.fresh().len(), 1000);
        assert!(matches!(fresh.get("ns", "r999"), Known::Version(r) if rv_num(&r) == Some(999)));
    }

    #[test]
    fn a_version_that_arrives_after_the_delete_is_not_remembered() {
        let recent = Recent::new(LONG);
        recent.remember(&version("r", 10));
        // One listener's watch delivers the delete; a slower one is still at version 11, and a
        // status write's answer (12) comes back after the delete event.
        recent.deleted(&Key::new("ns", "r"), Some("uid-r"), None);
        recent.remember(&version("r", 11));
        recent.remember(&version("r", 12));
        assert!(matches!(recent.get("ns", "r"), Known::Deleted(uid) if uid == "uid-r"));
        assert_eq!(remembered(&recent), None, "a deleted Run is not served");
        // A Run created again under the name is another Run.
        let again = |rv: u64| {
            let mut r = (*version("r", rv)).clone();
            r.metadata.uid = Some("uid-r-again".into());
            Arc::new(r)
        };
        recent.remember(&again(20));
        assert_eq!(remembered(&recent), Some(20));
        // A slower watch brings the old Run's delete (at 13) after the new one was
        // remembered: the new one stays.
        recent.deleted(&Key::new("ns", "r"), Some("uid-r"), Some(13));
        assert_eq!(
            remembered(&recent),
            Some(20),
            "the Run created again is kept"
        );
        // The delete of a Run newer than the one remembered (whose own delete no watch here
        // saw) ends it too.
        recent.deleted(&Key::new("ns", "r"), Some("uid-r-third"), Some(30));
        assert_eq!(remembered(&recent), None, "the older Run is not served");
        recent.remember(&again(20));
        // A delete whose uid is unknown only forgets.
        recent.deleted(&Key::new("ns", "r"), None, None);
        assert_eq!(remembered(&recent), None);
        recent.remember(&again(21));
        assert_eq!(remembered(&recent), Some(21));
        // What was deleted long ago is forgotten (and swept out).
        let brief = Recent::new(Duration::ZERO);
        brief.deleted(&Key::new("ns", "r"), Some("uid-r"), None);
        assert!(matches!(brief.get("ns", "r"), Known::Nothing));
        brief.fresh();
        assert!(brief.held.read().unwrap().gone.is_empty());
    }

    #[test]
    fn a_remembered_version_is_shared_not_copied() {
        let recent = Recent::new(LONG);
        let run = version("r", 1);
        recent.remember(&run);
        assert!(matches!(recent.get("ns", "r"), Known::Version(r) if Arc::ptr_eq(&r, &run)));
    }
}
