//! Who drives which Runs when several replicas run: the Runs are split into shards (a stable
//! hash of namespace and name, [`Shards::of`]), each shard has a coordination.k8s.io Lease, and
//! the live replicas — each announcing itself with a member Lease — share the shards evenly.
//! With one shard (the default) this is plain leader election.
//!
//! A replica that stops gracefully stops its controller, then releases its Leases; the others
//! follow Lease changes through a watch and take them over at once. One that dies keeps its
//! shards until their Leases expire. Expiry is judged from when this replica last saw a Lease
//! change (as client-go does), not from the writer's clock, so skew between nodes does not
//! matter; a holder that cannot renew for `renew_deadline` (shorter than the Lease duration)
//! stops driving the shard before anyone else may take it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::controller::Shards;

/// Default of [`Settings::duration`].
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default of [`Settings::renew_deadline`].
pub const RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Default of [`Settings::retry_period`].
pub const RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Most shards the Runs may be split into.
pub(crate) const MAX_SHARDS: u32 = 64;
/// Label on every Lease written here: the Lease group it belongs to.
pub(crate) const LABEL_GROUP: &str = "runway.dev/lease-group";
/// How long a graceful stop waits for the controller to let go of its shards.
const STOP_WAIT: Duration = Duration::from_secs(10);
/// Member Leases of replicas gone this many Lease durations are deleted.
const MEMBER_GC_DURATIONS: u32 = 10;

/// Settings of the shard Leases.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Name of the first shard's Lease (shard `i > 0`: `<name>-<i>`; members:
    /// `<name>-member-<identity>`).
    pub name: String,
    /// Namespace of the Leases.
    pub namespace: String,
    /// This replica's identity in them.
    pub identity: String,
    /// Number of shards the Runs are split into.
    pub shards: u32,
    /// How long a Lease holds without renewal: after a crash, the other replicas take over
    /// within about this time.
    pub duration: Duration,
    /// A holder that could not renew for this long stops driving the shard.
    pub renew_deadline: Duration,
    /// How often Leases are renewed, and the longest pause between two looks at them.
    pub retry_period: Duration,
}

/// Why lease settings cannot work; the message names the flags.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    /// `--shards` is out of range.
    #[error("--shards must be between 1 and {MAX_SHARDS}")]
    Shards,
    /// `--lease-duration` is not a whole, positive number of seconds (a Lease counts seconds).
    #[error("--lease-duration must be a whole number of seconds")]
    Duration,
    /// The retry period, renew deadline and lease duration are not in increasing order.
    #[error(
        "lease timings must satisfy 0 < --lease-retry-period < --lease-renew-deadline \
         < --lease-duration"
    )]
    Timings,
}

impl Settings {
    /// One shard (leader election) and the default timings.
    pub fn new(name: &str, namespace: &str, identity: &str) -> Self {
        Self {
            name: name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            shards: 1,
            duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        }
    }

    /// Why these settings cannot work, if they cannot.
    pub fn check(&self) -> Result<(), SettingsError> {
        if !(1..=MAX_SHARDS).contains(&self.shards) {
            return Err(SettingsError::Shards);
        }
        if self.duration.as_secs() < 1 || self.duration.subsec_nanos() != 0 {
            return Err(SettingsError::Duration);
        }
        if self.retry_period.is_zero()
            || self.retry_period >= self.renew_deadline
            || self.renew_deadline >= self.duration
        {
            return Err(SettingsError::Timings);
        }
        Ok(())
    }

    /// Lease name of shard `i`.
    pub(crate) fn shard_lease(&self, i: u32) -> String {
        match i {
            0 => self.name.clone(),
            i => format!("{}-{i}", self.name),
        }
    }

    fn member_prefix(&self) -> String {
        format!("{}-member-", self.name)
    }

    fn member_lease(&self) -> String {
        format!("{}{}", self.member_prefix(), self.identity)
    }
}

/// One Lease as this replica saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Seen {
    /// Its holder.
    pub holder: Option<String>,
    /// Its duration.
    pub duration: Duration,
    /// Since this replica saw it change last.
    pub unchanged_for: Duration,
}

impl Seen {
    /// Nobody holds it: released, or not renewed within its duration.
    fn free(&self) -> bool {
        self.holder.is_none() || self.unchanged_for >= self.duration
    }

    /// How long it has been free.
    fn free_for(&self) -> Duration {
        match self.holder {
            None => self.unchanged_for,
            Some(_) => self.unchanged_for.saturating_sub(self.duration),
        }
    }
}

/// What to write this round.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Held shards whose renewal is due.
    pub renew: Vec<u32>,
    /// Held shards beyond this replica's share, to hand over.
    pub release: Vec<u32>,
    /// Free shards to take.
    pub acquire: Vec<u32>,
}

/// Decide which shard Leases to renew, release and take. Each of `members` live replicas
/// should hold `ceil(shards / members)` at most; a replica below its share takes free shards,
/// lowest first; one above it hands the highest over. A shard nobody took for a whole Lease
/// duration is taken by anyone, so that replicas that disagree on the member count for a
/// while still leave no shard undriven.
pub(crate) fn plan(shards: &[Option<Seen>], me: &str, members: usize, retry: Duration) -> Plan {
    let fair = shards.len().div_ceil(members.max(1));
    let mine: Vec<u32> = (0..shards.len() as u32)
        .filter(|&i| {
            shards[i as usize]
                .as_ref()
                .is_some_and(|s| !s.free() && s.holder.as_deref() == Some(me))
        })
        .collect();
    let (keep, release) = mine.split_at(mine.len().min(fair));
    let renew = keep
        .iter()
        .copied()
        .filter(|&i| {
            shards[i as usize]
                .as_ref()
                .is_some_and(|s| s.unchanged_for >= retry)
        })
        .collect();
    let free: Vec<(u32, bool)> = (0..shards.len() as u32)
        .filter_map(|i| match &shards[i as usize] {
            None => Some((i, false)),
            Some(s) if s.free() => Some((i, s.free_for() >= s.duration)),
            Some(_) => None,
        })
        .collect();
    let room = fair - keep.len();
    let acquire = free
        .iter()
        .enumerate()
        .filter(|(n, (_, orphan))| *n < room || (*orphan && release.is_empty()))
        .map(|(_, (i, _))| *i)
        .collect();
    Plan {
        renew,
        release: release.to_vec(),
        acquire,
    }
}

/// Resource version as a number, to tell which of two copies of a Lease is newer.
fn rv_num(l: &Lease) -> Option<u64> {
    l.metadata.resource_version.as_deref()?.parse().ok()
}

/// Keeps this replica's Leases: renews, releases and takes them, and says which shards it owns.
pub(crate) struct Elector {
    api: Api<Lease>,
    settings: Settings,
    cache: Store<Lease>,
    /// Fires whenever the cache changes (another replica wrote, released or took a Lease).
    changes: watch::Receiver<()>,
    /// Copies of Leases written here, until the watch has caught up with them.
    written: HashMap<String, Lease>,
    /// (resource version, first seen) of every Lease looked at.
    seen: HashMap<String, (String, Instant)>,
    /// Shards the last round decided to hand over.
    handing_over: BTreeSet<u32>,
}

impl Elector {
    /// Start following the Leases of `settings.namespace`.
    /// Start following the Leases of `settings.namespace`: the elector, and the watch that
    /// keeps its cache (to be spawned).
    pub(crate) fn start(
        client: kube::Client,
        settings: Settings,
    ) -> (Self, impl Future<Output = ()> + Send + 'static) {
        let api: Api<Lease> = Api::namespaced(client, &settings.namespace);
        let (cache, writer) = reflector::store();
        let (changed, changes) = watch::channel(());
        let follow = reflector::reflector(writer, watcher(api.clone(), watcher::Config::default()))
            .default_backoff()
            .applied_objects()
            .for_each(move |_| {
                changed.send_replace(());
                async {}
            });
        let me = Self {
            api,
            settings,
            cache,
            changes,
            written: HashMap::new(),
            seen: HashMap::new(),
            handing_over: BTreeSet::new(),
        };
        (me, follow)
    }

    /// The newest copy of Lease `name` known here.
    fn lease(&self, name: &str) -> Option<Lease> {
        let cached = self
            .cache
            .get(&reflector::ObjectRef::new(name).within(&self.settings.namespace))
            .map(|l| (*l).clone());
        let written = self.written.get(name).cloned();
        match (cached, written) {
            (Some(c), Some(w)) if rv_num(&w) > rv_num(&c) => Some(w),
            (c, w) => c.or(w),
        }
    }

    fn observe(&mut self, name: &str, now: Instant) -> Option<Seen> {
        let lease = self.lease(name)?;
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let entry = self
            .seen
            .entry(name.to_owned())
            .or_insert_with(|| (rv.clone(), now));
        if entry.0 != rv {
            *entry = (rv, now);
        }
        let spec = lease.spec.unwrap_or_default();
        Some(Seen {
            holder: spec.holder_identity.filter(|h| !h.is_empty()),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            unchanged_for: now - entry.1,
        })
    }

    /// Write Lease `name` with `holder`, conditional on the copy seen here; whether it was
    /// written.
    async fn write(&mut self, name: &str, holder: Option<&str>) -> bool {
        // A renewal counts from when it was sent: the API server may have stored it any time
        // up to the answer, and another replica times the Lease from when it saw it change.
        let sent = Instant::now();
        let now = MicroTime(jiff::Timestamp::now());
        let existing = self.lease(name);
        let spec = existing
            .as_ref()
            .and_then(|l| l.spec.clone())
            .unwrap_or_default();
        let taking = holder.is_some() && spec.holder_identity.as_deref() != holder;
        let mut next = LeaseSpec {
            holder_identity: holder.map(str::to_owned),
            lease_duration_seconds: Some(self.settings.duration.as_secs() as i32),
            renew_time: Some(now.clone()),
            ..spec
        };
        if taking {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(next.lease_transitions.unwrap_or(0) + 1);
        }
        let request = async {
            match existing {
                // A merge patch carrying the resource version is refused (409) when the Lease
                // changed since it was seen here.
                Some(l) => {
                    let mut spec = serde_json::to_value(&next).unwrap_or_default();
                    // Absent fields are left alone by a merge patch: a release says null.
                    spec["holderIdentity"] = serde_json::json!(holder);
                    let patch = serde_json::json!({
                        "metadata": {"resourceVersion": l.metadata.resource_version},
                        "spec": spec,
                    });
                    self.api
                        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                }
                None => {
                    let mut l = Lease::default();
                    l.metadata.name = Some(name.to_owned());
                    l.metadata.labels = Some(BTreeMap::from([(
                        LABEL_GROUP.to_owned(),
                        self.settings.name.clone(),
                    )]));
                    l.spec = Some(next);
                    self.api.create(&PostParams::default(), &l).await
                }
            }
        };
        // A request the API server never answers must not hold the renewals up.
        let Ok(result) = tokio::time::timeout(self.settings.retry_period, request).await else {
            tracing::warn!(lease = name, "writing the lease timed out");
            return false;
        };
        match result {
            Ok(written) => {
                let rv = written
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_default();
                self.seen.insert(name.to_owned(), (rv, sent));
                self.written.insert(name.to_owned(), written);
                true
            }
            // Someone else wrote it first: look again next round.
            Err(kube::Error::Api(e)) if e.code == 409 => false,
            Err(e) => {
                tracing::warn!(lease = name, error = %e, "cannot write the lease");
                false
            }
        }
    }

    /// Live replicas, this one included. A member Lease counts while its renew time plus its
    /// duration is ahead of this replica's clock: members only size the shares, so a skewed
    /// clock makes a share uneven for a while, never a shard driven twice — and a replica just
    /// started does not count a dead one for a whole Lease duration, as judging by first sight
    /// would.
    async fn members(&mut self) -> usize {
        let prefix = self.settings.member_prefix();
        let me = self.settings.member_lease();
        let now = jiff::Timestamp::now();
        let mut live = 1;
        let mut gone = Vec::new();
        for lease in self.cache.state() {
            let Some(name) = lease.metadata.name.as_deref() else {
                continue;
            };
            if !name.starts_with(&prefix) || name == me {
                continue;
            }
            let spec = lease.spec.clone().unwrap_or_default();
            let duration = jiff::SignedDuration::from_secs(
                spec.lease_duration_seconds.unwrap_or(0).max(0).into(),
            );
            let Some(renewed) = spec.renew_time.map(|t| t.0) else {
                continue;
            };
            if spec.holder_identity.is_some() && renewed + duration > now {
                live += 1;
            } else if renewed + duration * MEMBER_GC_DURATIONS as i32 <= now {
                // A replica gone for good (a pod name never comes back).
                gone.push(name.to_owned());
            }
        }
        for name in gone {
            let dp = DeleteParams::default();
            let _ =
                tokio::time::timeout(self.settings.retry_period, self.api.delete(&name, &dp)).await;
        }
        live
    }

    /// One round of writes: renew, release, take.
    async fn act(&mut self, running: &BTreeSet<u32>) {
        let now = Instant::now();
        let retry = self.settings.retry_period;
        let me = self.settings.identity.clone();
        let member = self.settings.member_lease();
        if self
            .observe(&member, now)
            .is_none_or(|s| s.unchanged_for >= retry || s.holder.as_deref() != Some(&me))
        {
            self.write(&member, Some(&me)).await;
        }
        let members = self.members().await;
        let names: Vec<String> = (0..self.settings.shards)
            .map(|i| self.settings.shard_lease(i))
            .collect();
        let view: Vec<Option<Seen>> = names.iter().map(|n| self.observe(n, now)).collect();
        let plan = plan(&view, &me, members, retry);
        self.handing_over = plan.release.iter().copied().collect();
        for &i in &plan.release {
            // Handed over only once the controller has let go of it.
            if !running.contains(&i) {
                self.write(&names[i as usize], None).await;
            }
        }
        for i in plan.renew.into_iter().chain(plan.acquire) {
            self.write(&names[i as usize], Some(&me)).await;
        }
    }

    /// How long until the first of this replica's shards passes its renew deadline, if it
    /// holds any.
    fn first_deadline(&mut self) -> Option<Duration> {
        let now = Instant::now();
        let me = self.settings.identity.clone();
        let deadline = self.settings.renew_deadline;
        let names: Vec<String> = (0..self.settings.shards)
            .map(|i| self.settings.shard_lease(i))
            .collect();
        names
            .iter()
            .filter_map(|name| self.observe(name, now))
            .filter(|seen| seen.holder.as_deref() == Some(&me))
            .map(|seen| deadline.saturating_sub(seen.unchanged_for))
            .min()
    }

    /// The shards this replica may drive now — held, renewed within the renew deadline, and
    /// not being handed over — and when to look again at the latest: when another holder's
    /// Lease would expire, or one of ours would pass its renew deadline.
    fn owned(&mut self) -> (BTreeSet<u32>, Duration) {
        let now = Instant::now();
        let me = self.settings.identity.clone();
        let deadline = self.settings.renew_deadline;
        let mut owned = BTreeSet::new();
        let mut next = self.settings.retry_period;
        for i in 0..self.settings.shards {
            let Some(seen) = self.observe(&self.settings.shard_lease(i), now) else {
                continue;
            };
            if seen.holder.as_deref() == Some(&me) {
                if seen.unchanged_for < deadline && !self.handing_over.contains(&i) {
                    owned.insert(i);
                    next = next.min(deadline - seen.unchanged_for);
                }
            } else if !seen.free() {
                next = next.min(seen.duration - seen.unchanged_for);
            }
        }
        (owned, next.max(Duration::from_millis(10)))
    }

    /// Keep the Leases until `shutdown`, publishing the shards owned on `owned`; `running` says
    /// which shards the controller drives right now. On shutdown, once the controller has
    /// stopped, every Lease held is released and the member Lease deleted.
    pub(crate) async fn run(
        mut self,
        owned: watch::Sender<Shards>,
        mut running: watch::Receiver<BTreeSet<u32>>,
        shutdown: CancellationToken,
    ) {
        let _ = self.cache.wait_until_ready().await;
        let mut changes = self.changes.clone();
        loop {
            let current = running.borrow_and_update().clone();
            // Bounded, so that a slow API server cannot keep a shard past its renew deadline:
            // the shards owned are looked at again by then at the latest.
            let bound = act_bound(self.settings.renew_deadline, self.first_deadline());
            let _ = tokio::time::timeout(bound, self.act(&current)).await;
            let (mine, next) = self.owned();
            owned.send_if_modified(|s| {
                let changed = s.owned != mine;
                s.owned = mine;
                changed
            });
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(next) => {}
                _ = changes.changed() => {}
                _ = running.changed() => {}
            }
        }
        owned.send_modify(|s| s.owned.clear());
        let stopped = running.wait_for(BTreeSet::is_empty);
        let _ = tokio::time::timeout(STOP_WAIT, stopped).await;
        let still = running.borrow().clone();
        let me = self.settings.identity.clone();
        for i in 0..self.settings.shards {
            let name = self.settings.shard_lease(i);
            let mine = self.lease(&name).and_then(|l| l.spec?.holder_identity);
            if mine.as_deref() != Some(&me) {
                continue;
            }
            if still.contains(&i) {
                // Never hand over a shard that may still be driven here: it expires instead.
                tracing::warn!(lease = %name, "the controller did not stop in time; leaving the lease to expire");
            } else {
                self.write(&name, None).await;
            }
        }
        let member = self.settings.member_lease();
        let dp = DeleteParams::default();
        let _ =
            tokio::time::timeout(self.settings.retry_period, self.api.delete(&member, &dp)).await;
        tracing::info!(identity = %me, "released the leases");
    }
}

/// How long one round of writes may take: half the renew deadline, and never past the moment
/// the first shard held (`first`, from now) passes it — the round must end before that to let
/// go of the shard in time (a moment at least, to try the renewal).
fn act_bound(renew_deadline: Duration, first: Option<Duration>) -> Duration {
    let half = renew_deadline / 2;
    first
        .map_or(half, |left| left.min(half))
        .max(Duration::from_millis(100))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_round_of_writes_ends_before_a_held_shard_passes_its_renew_deadline() {
        let deadline = Duration::from_secs(10);
        assert_eq!(act_bound(deadline, None), Duration::from_secs(5));
        assert_eq!(
            act_bound(deadline, Some(Duration::from_secs(8))),
            Duration::from_secs(5)
        );
        assert_eq!(
            act_bound(deadline, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            act_bound(deadline, Some(Duration::ZERO)),
            Duration::from_millis(100)
        );
    }

    const D: Duration = Duration::from_secs(15);
    const RETRY: Duration = Duration::from_secs(2);

    fn held(by: &str, for_s: u64) -> Option<Seen> {
        Some(Seen {
            holder: Some(by.into()),
            duration: D,
            unchanged_for: Duration::from_secs(for_s),
        })
    }

    fn released(for_s: u64) -> Option<Seen> {
        Some(Seen {
            holder: None,
            duration: D,
            unchanged_for: Duration::from_secs(for_s),
        })
    }

    #[test]
    fn a_lone_replica_takes_every_shard_and_renews_when_due() {
        let p = plan(&[None, None, None], "a", 1, RETRY);
        assert_eq!(p.acquire, vec![0, 1, 2]);
        let p = plan(&[held("a", 1), held("a", 3), held("a", 0)], "a", 1, RETRY);
        assert_eq!(
            p,
            Plan {
                renew: vec![1],
                ..Default::default()
            }
        );
    }

    #[test]
    fn a_new_member_gets_a_share_handed_over() {
        let shards = [held("a", 1), held("a", 1), held("a", 1), held("a", 1)];
        // a sees b: it keeps two and releases the highest two.
        let p = plan(&shards, "a", 2, RETRY);
        assert_eq!(p.release, vec![2, 3]);
        assert!(p.acquire.is_empty());
        // b waits while they are held, and takes them once released.
        assert_eq!(plan(&shards, "b", 2, RETRY), Plan::default());
        let after = [held("a", 0), held("a", 0), released(0), released(0)];
        assert_eq!(plan(&after, "b", 2, RETRY).acquire, vec![2, 3]);
    }

    #[test]
    fn a_dead_holders_shards_are_taken_once_its_leases_expire() {
        let shards = [held("a", 1), held("b", 14)];
        assert!(plan(&shards, "a", 2, RETRY).acquire.is_empty());
        let shards = [held("a", 1), held("b", 15)];
        // b's member Lease expired as well: a is alone.
        assert_eq!(plan(&shards, "a", 1, RETRY).acquire, vec![1]);
        // Even while a still counts b as a member, the shard is taken once it has been free
        // for a whole Lease duration.
        assert!(plan(&shards, "a", 2, RETRY).acquire.is_empty());
        let shards = [held("a", 1), held("b", 30)];
        assert_eq!(plan(&shards, "a", 2, RETRY).acquire, vec![1]);
    }

    #[test]
    fn with_one_shard_the_others_stand_by() {
        assert!(plan(&[held("a", 5)], "b", 2, RETRY).acquire.is_empty());
        assert_eq!(plan(&[released(0)], "b", 2, RETRY).acquire, vec![0]);
        // Its own Lease, not renewed within its duration, is taken again like a free one.
        assert_eq!(plan(&[held("b", 16)], "b", 2, RETRY).acquire, vec![0]);
    }

    #[test]
    fn shares_are_even_with_more_replicas_than_shards() {
        let shards = [held("a", 1), None];
        assert_eq!(plan(&shards, "b", 3, RETRY).acquire, vec![1]);
        assert!(plan(&shards, "c", 3, RETRY).acquire.len() <= 1);
    }

    #[test]
    fn timings_are_checked() {
        let ok = Settings {
            name: "runway-controller".into(),
            namespace: "runway-system".into(),
            identity: "a".into(),
            shards: 1,
            duration: LEASE_DURATION,
            renew_deadline: RENEW_DEADLINE,
            retry_period: RETRY_PERIOD,
        };
        assert!(ok.check().is_ok());
        assert_eq!(ok.shard_lease(0), "runway-controller");
        assert_eq!(ok.shard_lease(2), "runway-controller-2");
        for bad in [
            Settings {
                shards: 0,
                ..ok.clone()
            },
            Settings {
                shards: MAX_SHARDS + 1,
                ..ok.clone()
            },
            Settings {
                duration: Duration::from_millis(1500),
                ..ok.clone()
            },
            Settings {
                renew_deadline: LEASE_DURATION,
                ..ok.clone()
            },
            Settings {
                retry_period: RENEW_DEADLINE,
                ..ok.clone()
            },
            Settings {
                retry_period: Duration::ZERO,
                ..ok.clone()
            },
        ] {
            assert!(bad.check().is_err(), "{bad:?}");
        }
    }
}
