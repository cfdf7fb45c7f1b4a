//! How a replica's reads of Runs are made from its reflector and the versions it knows of
//! beside it (its own writes and what its watches delivered moments ago).

use std::collections::HashMap;
use std::sync::Arc;

use super::recent::{Known, rv_num};
use super::{StoreError, key_of};
use crate::api::ObjectKey as Key;
use crate::api::Run;

/// Whether the reflector's copy `r` of `k` is of a Run deleted moments ago (`gone`, by uid).
pub(super) fn is_gone(gone: &HashMap<Key, String>, k: &Key, r: &Run) -> bool {
    gone.get(k)
        .is_some_and(|uid| r.metadata.uid.as_ref() == Some(uid))
}

/// Where a read of one Run finds its answer.
#[derive(Debug)]
pub(super) enum Found {
    /// In memory (`None`: deleted moments ago, the cache has not seen it yet).
    Here(Option<Arc<Run>>),
    /// In the cache, which has caught up with the version remembered: forget versions up to
    /// this one.
    CaughtUp(Arc<Run>, u64),
    /// Only the API server knows.
    Source,
}

/// One Run as a replica knows it: what it remembers (`recent`, read first), else the cache
/// (`cached`). The other way round, a read could find the cache before it took a write in
/// and, by the time it looked, the write already forgotten (another read saw the cache catch
/// up): it would answer with a version older than a write that had returned.
pub(super) fn find(
    recent: impl FnOnce() -> Known,
    cached: impl FnOnce() -> Option<Arc<Run>>,
) -> Found {
    let own = recent();
    match (cached(), own) {
        (Some(c), Known::Nothing) => Found::Here(Some(c)),
        (Some(c), Known::Deleted(uid)) if c.metadata.uid.as_ref() == Some(&uid) => {
            Found::Here(None)
        }
        (Some(c), Known::Deleted(_)) => Found::Here(Some(c)),
        (Some(c), Known::Version(o)) => match (rv_num(&c), rv_num(&o)) {
            (Some(a), Some(b)) if a >= b => Found::CaughtUp(c, a),
            (Some(_), Some(_)) => Found::Here(Some(o)),
            _ => Found::Source,
        },
        // Written here moments ago; the cache has not seen it yet.
        (None, Known::Version(o)) => Found::Here(Some(o)),
        // Not in the cache (yet, or any more).
        (None, Known::Nothing | Known::Deleted(_)) => Found::Source,
    }
}

/// The Runs `wanted` keeps, each at the newest version known: the reflector's `snapshot`
/// without the Runs `gone`, overlaid with the `recent` versions newer than the snapshot's.
///
/// A recent version of a Run the snapshot does not list is weighed against the reflector as
/// it is *now* (`cached_now`): the reflector may have taken the Run in after the snapshot, and
/// then it holds a version at least as new as the recent one. Skipping the recent version
/// without taking the reflector's in its place lost a Run created moments before the list
/// from both.
pub(super) fn overlay(
    snapshot: Vec<Arc<Run>>,
    recent: Vec<Arc<Run>>,
    gone: &HashMap<Key, String>,
    wanted: impl Fn(&Run) -> bool,
    cached_now: impl Fn(&Key) -> Option<Arc<Run>>,
) -> Result<Vec<Arc<Run>>, StoreError> {
    let mut all: HashMap<Key, Arc<Run>> = HashMap::new();
    for r in snapshot.into_iter().filter(|r| wanted(r)) {
        let k = key_of(&r)?;
        if !is_gone(gone, &k, &r) {
            all.insert(k, r);
        }
    }
    let newer = |r: &Run, than: &Run| rv_num(than).zip(rv_num(r)).is_some_and(|(a, b)| b > a);
    for r in recent {
        let k = key_of(&r)?;
        let newest = match all.get(&k) {
            Some(listed) if newer(&r, listed) => r,
            Some(_) => continue,
            // Not listed: not in the snapshot, or there with labels `wanted` refuses.
            None => match cached_now(&k) {
                Some(c) if !newer(&r, &c) => c,
                _ => r,
            },
        };
        // A write may have changed the labels: the newest version replaces the listed one
        // either way.
        all.remove(&k);
        if wanted(&newest) && !is_gone(gone, &k, &newest) {
            all.insert(k, newest);
        }
    }
    Ok(all.into_values().collect())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use jiff::Timestamp;
    use serde_json::Value;

    use super::*;

    fn version(name: &str, rv: u64, team: &str) -> Arc<Run> {
        let mut r = Run::requested("ns", name, "w", Value::Null, None, Timestamp::UNIX_EPOCH)
            .with_labels([("team", team.to_owned())]);
        r.metadata.resource_version = Some(rv.to_string());
        r.metadata.uid = Some(format!("uid-{name}"));
        Arc::new(r)
    }

    fn team(t: &str) -> impl Fn(&Run) -> bool {
        let selector = BTreeMap::from([("team".to_owned(), t.to_owned())]);
        move |r: &Run| super::super::labels_match(r.metadata.labels.as_ref(), &selector)
    }

    fn names(mut runs: Vec<Arc<Run>>) -> Vec<(String, u64)> {
        runs.sort_by_key(|r| r.metadata.name.clone());
        runs.iter()
            .map(|r| (r.metadata.name.clone().unwrap(), rv_num(r).unwrap()))
            .collect()
    }

    #[test]
    fn a_read_never_goes_back_past_a_write_that_returned() {
        // A write's answer, version 7, is remembered; the cache holds 5. As the read looks at
        // the cache, the cache takes 7 in and another read forgets the remembered version.
        let recent = super::super::recent::Recent::new(std::time::Duration::from_secs(3600));
        recent.remember(&version("r", 7, "a"));
        let cache = std::sync::Mutex::new(version("r", 5, "a"));
        let cached = || {
            let seen = cache.lock().unwrap().clone();
            *cache.lock().unwrap() = version("r", 7, "a");
            recent.forget_caught_up(Key::new("ns", "r"), 7);
            Some(seen)
        };
        match find(|| recent.get("ns", "r"), cached) {
            Found::Here(Some(r)) => assert_eq!(rv_num(&r), Some(7)),
            other => panic!("not the written version: {other:?}"),
        }
        // Once caught up, the cache answers and the remembered version is let go.
        let recent = super::super::recent::Recent::new(std::time::Duration::from_secs(3600));
        recent.remember(&version("r", 7, "a"));
        let found = find(|| recent.get("ns", "r"), || Some(version("r", 8, "a")));
        assert!(matches!(found, Found::CaughtUp(r, 8) if rv_num(&r) == Some(8)));
        // Deleted moments ago: gone, unless the cache holds a Run created again since.
        recent.deleted(&Key::new("ns", "r"), Some("uid-r"), None);
        let found = find(|| recent.get("ns", "r"), || Some(version("r", 8, "a")));
        assert!(matches!(found, Found::Here(None)), "{found:?}");
        let mut again = (*version("r", 9, "a")).clone();
        again.metadata.uid = Some("uid-again".into());
        let found = find(|| recent.get("ns", "r"), || Some(Arc::new(again)));
        assert!(matches!(found, Found::Here(Some(r)) if rv_num(&r) == Some(9)));
        assert!(matches!(find(|| Known::Nothing, || None), Found::Source));
    }

    #[test]
    fn a_run_the_reflector_takes_in_after_the_snapshot_is_listed() {
        // Created here at 7; the snapshot was taken before the reflector had it, and by the time
        // the recent version is weighed the reflector holds 8 (the controller's first status).
        let listed = overlay(
            vec![version("old", 3, "a")],
            vec![version("new", 7, "a")],
            &HashMap::new(),
            team("a"),
            |k| (k.name == "new").then(|| version("new", 8, "a")),
        )
        .unwrap();
        assert_eq!(names(listed), [("new".into(), 8), ("old".into(), 3)]);
    }

    #[test]
    fn the_newest_version_decides_and_its_labels_count() {
        let snapshot = vec![version("moved", 3, "a"), version("kept", 5, "a")];
        let recent = vec![
            // Written here since: its labels no longer match.
            version("moved", 4, "b"),
            // Older than the snapshot's.
            version("kept", 4, "b"),
            // Not in the snapshot because it does not match, and newer there than here.
            version("elsewhere", 6, "a"),
            // Only here.
            version("fresh", 1, "a"),
        ];
        let now = |k: &Key| (k.name == "elsewhere").then(|| version("elsewhere", 9, "b"));
        let listed = overlay(snapshot, recent, &HashMap::new(), team("a"), now).unwrap();
        assert_eq!(names(listed), [("fresh".into(), 1), ("kept".into(), 5)]);
    }

    #[test]
    fn runs_deleted_moments_ago_are_left_out() {
        let gone = HashMap::from([
            (Key::new("ns", "cached"), "uid-cached".to_owned()),
            (Key::new("ns", "late"), "uid-late".to_owned()),
        ]);
        let listed = overlay(
            vec![version("cached", 1, "a")],
            vec![version("late", 2, "a")],
            &gone,
            team("a"),
            |k| (k.name == "late").then(|| version("late", 3, "a")),
        )
        .unwrap();
        assert!(listed.is_empty(), "{:?}", names(listed));
    }
}
