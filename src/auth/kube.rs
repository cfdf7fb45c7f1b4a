//! Identity and access from the cluster: TokenReview authenticates bearer tokens and
//! SubjectAccessReview answers access questions (group `runway.dev`). Both are cached briefly —
//! by a hash of the token, and by user, groups, verb, resource and namespace — and each thread
//! remembers its last few answers in front of those caches (`memo.rs` beside this file).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use super::{AuthError, Authenticator, Authorizer, Identity, Resource, Verb, memo};
use crate::api::{GROUP, Principal};
use crate::telemetry::Metrics;

/// Prefix of ServiceAccount user names.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Most entries a cache keeps; past it the oldest entries make room.
const MAX_ENTRIES: usize = 10_000;

struct Cache<K, V> {
    ttl: Duration,
    /// Read by every request, written only on a miss: readers never wait for each other.
    entries: RwLock<HashMap<K, (Instant, V)>>,
    /// Reviews in progress: callers that miss the same key at once (every caller of a token
    /// when its entry expires) wait for one review instead of each sending their own.
    pending: Mutex<HashMap<K, Arc<Review<V>>>>,
}

/// One review in progress: when its answer was cached, and the answer.
type Review<V> = tokio::sync::OnceCell<(Instant, V)>;

/// A cached answer: when the cache got it, and whether this caller's fetch gave it.
struct Answer<V> {
    value: V,
    at: Instant,
    fetched: bool,
}

impl<K: Eq + Hash + Clone, V: Clone> Cache<K, V> {
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: RwLock::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
        }
    }

    /// The answer for `k`: cached, or given by `fetch` (and cached). Callers that miss the same
    /// key at the same time share one fetch; one whose fetch fails leaves the next waiter to
    /// try its own.
    async fn get_or_fetch<E, Fut>(&self, k: K, fetch: impl FnOnce() -> Fut) -> Result<Answer<V>, E>
    where
        Fut: Future<Output = Result<V, E>>,
    {
        if let Some((at, value)) = self.get(&k) {
            return Ok(Answer {
                value,
                at,
                fetched: false,
            });
        }
        let cell = self
            .pending
            .lock()
            .expect("pending lock")
            .entry(k.clone())
            .or_default()
            .clone();
        let mut fetched = false;
        let got = cell
            .get_or_try_init(|| {
                fetched = true;
                async {
                    let v = fetch().await?;
                    // Cached before the waiters are told, so that no caller finds neither.
                    Ok((self.put(k.clone(), v.clone()), v))
                }
            })
            .await
            .cloned();
        let mut pending = self.pending.lock().expect("pending lock");
        if pending.get(&k).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            pending.remove(&k);
        }
        got.map(|(at, value)| Answer { value, at, fetched })
    }

    /// The answer cached for `k` and when it was got, while fresh.
    fn get(&self, k: &K) -> Option<(Instant, V)> {
        let entries = self.entries.read().expect("cache lock");
        entries
            .get(k)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .cloned()
    }

    /// Cache `v` for `k`; when it was cached.
    fn put(&self, k: K, v: V) -> Instant {
        let mut entries = self.entries.write().expect("cache lock");
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&k) {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            // Still full of live entries: the oldest tenth goes, not everyone's answers at once
            // (a flood of new callers must not turn every request into a review).
            if entries.len() >= MAX_ENTRIES {
                let mut ages: Vec<(Instant, K)> = entries
                    .iter()
                    .map(|(k, (at, _))| (*at, k.clone()))
                    .collect();
                ages.sort_by_key(|(at, _)| *at);
                for (_, old) in ages.into_iter().take(MAX_ENTRIES / 10) {
                    entries.remove(&old);
                }
            }
        }
        let at = Instant::now();
        entries.insert(k, (at, v));
        at
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.read().expect("cache lock").len()
    }
}

/// The cache key of an access decision: SHA-256 over everything a SubjectAccessReview asks —
/// user, uid, groups, extra, verb, resource, namespace — each length-prefixed, so that two
/// different questions cannot share an answer, and a lookup copies none of the caller's names.
fn question(who: &Identity, verb: Verb, resource: Resource, namespace: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut field = |b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    let p = &who.principal;
    field(p.username.as_bytes());
    field(p.uid.as_deref().map_or(&[0xff][..], str::as_bytes));
    field(&(p.groups.len() as u64).to_le_bytes());
    for g in &p.groups {
        field(g.as_bytes());
    }
    field(&(who.extra.len() as u64).to_le_bytes());
    for (k, vs) in &who.extra {
        field(k.as_bytes());
        field(&(vs.len() as u64).to_le_bytes());
        for v in vs {
            field(v.as_bytes());
        }
    }
    field(verb.as_str().as_bytes());
    field(resource.as_str().as_bytes());
    field(namespace.as_bytes());
    h.finalize().into()
}

/// The namespace of a ServiceAccount user name, if it is one.
pub fn service_account_namespace(username: &str) -> Option<&str> {
    let rest = username.strip_prefix(SERVICE_ACCOUNT_PREFIX)?;
    rest.split_once(':')
        .map(|(ns, _)| ns)
        .filter(|ns| !ns.is_empty())
}

/// TokenReview + SubjectAccessReview.
pub struct KubeAuth {
    client: Client,
    audiences: Vec<String>,
    ttl: Duration,
    tokens: Cache<memo::TokenKey, Option<Arc<Identity>>>,
    decisions: Cache<[u8; 32], bool>,
    /// Whose entries this is in each thread's memo.
    owner: u64,
    metrics: Metrics,
}

impl KubeAuth {
    /// Reviews through `client`, cached for `ttl`.
    pub fn new(client: Client, audiences: Vec<String>, ttl: Duration, metrics: Metrics) -> Self {
        Self {
            client,
            audiences,
            ttl,
            tokens: Cache::new(ttl),
            decisions: Cache::new(ttl),
            owner: memo::next_owner(),
            metrics,
        }
    }
}

#[async_trait]
impl Authenticator for KubeAuth {
    async fn authenticate(&self, token: Option<&str>) -> Result<Arc<Identity>, AuthError> {
        self.authenticate_until(token)
            .await
            .map(|(identity, _)| identity)
    }

    async fn authenticate_until(
        &self,
        token: Option<&str>,
    ) -> Result<(Arc<Identity>, Option<Instant>), AuthError> {
        let token =
            token.ok_or_else(|| AuthError::Unauthenticated("missing bearer token".into()))?;
        let key: memo::TokenKey = Sha256::digest(token.as_bytes()).into();
        let now = Instant::now();
        let (identity, at) = match memo::with(|m| m.identity(self.owner, &key, now, self.ttl)) {
            Some(known) => {
                self.metrics.auth_cache("token", true);
                known
            }
            // Boxed apart: inline, a review's state would size every hit's future.
            None => Box::pin(self.identity_missed(token, key)).await?,
        };
        let identity =
            identity.ok_or_else(|| AuthError::Unauthenticated("token rejected".into()))?;
        Ok((identity, Some(at + self.ttl)))
    }
}

impl KubeAuth {
    /// Who `token` is when this thread's memo does not know: the shared cache, or a review;
    /// and when that answer was got.
    async fn identity_missed(
        &self,
        token: &str,
        key: memo::TokenKey,
    ) -> Result<(Option<Arc<Identity>>, Instant), AuthError> {
        let got = self
            .tokens
            .get_or_fetch(key, || self.review_token(token))
            .await?;
        self.metrics.auth_cache("token", !got.fetched);
        let identity =
            memo::with(|m| m.remember_identity(self.owner, &key, got.at, got.value.as_deref()));
        Ok((identity, got.at))
    }

    /// Who `token` is, by TokenReview; `None` when the API server does not vouch for it for
    /// one of our audiences.
    async fn review_token(&self, token: &str) -> Result<Option<Arc<Identity>>, AuthError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: (!self.audiences.is_empty()).then(|| self.audiences.clone()),
            },
            ..Default::default()
        };
        let api: Api<TokenReview> = Api::all(self.client.clone());
        let out = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AuthError::Backend(format!("TokenReview: {e}")))?;
        let status = out.status.unwrap_or_default();
        // A token for another audience is no token for us, whatever else it proves.
        let audience_ok = self.audiences.is_empty()
            || status
                .audiences
                .as_ref()
                .is_some_and(|a| a.iter().any(|x| self.audiences.contains(x)));
        let identity = match (status.authenticated, status.user) {
            (Some(true), Some(user))
                if audience_ok && user.username.as_deref().is_some_and(|u| !u.is_empty()) =>
            {
                let username = user.username.unwrap_or_default();
                let namespace = service_account_namespace(&username).map(str::to_owned);
                Some(Arc::new(Identity {
                    principal: Principal {
                        username,
                        uid: user.uid,
                        groups: user.groups.unwrap_or_default(),
                    },
                    namespace,
                    extra: user.extra.unwrap_or_default().into_iter().collect(),
                }))
            }
            _ => None,
        };
        Ok(identity)
    }
}

#[async_trait]
impl Authorizer for KubeAuth {
    async fn allowed(
        &self,
        who: &Identity,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        let q = memo::Question {
            who,
            verb,
            resource,
            namespace,
        };
        let now = Instant::now();
        if let Some(allowed) = memo::with(|m| m.decision(self.owner, q, now, self.ttl)) {
            self.metrics.auth_cache("access", true);
            return Ok(allowed);
        }
        // Boxed apart: inline, a review's state would size every hit's future.
        Box::pin(self.decision_missed(q)).await
    }
}

impl KubeAuth {
    /// The answer to `q` when this thread's memo does not know: the shared cache, or a review.
    async fn decision_missed(&self, q: memo::Question<'_>) -> Result<bool, AuthError> {
        let key = question(q.who, q.verb, q.resource, q.namespace);
        let got = self
            .decisions
            .get_or_fetch(key, || {
                self.review_access(q.who, q.verb, q.resource, q.namespace)
            })
            .await?;
        self.metrics.auth_cache("access", !got.fetched);
        memo::with(|m| m.remember_decision(self.owner, q, got.at, got.value));
        Ok(got.value)
    }

    /// Whether `who` may `verb` `resource` in `namespace`, by SubjectAccessReview.
    async fn review_access(
        &self,
        who: &Identity,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        let p = &who.principal;
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(p.username.clone()),
                uid: p.uid.clone(),
                groups: (!p.groups.is_empty()).then(|| p.groups.clone()),
                extra: (!who.extra.is_empty()).then(|| who.extra.clone().into_iter().collect()),
                resource_attributes: Some(ResourceAttributes {
                    group: Some(GROUP.into()),
                    resource: Some(resource.as_str().into()),
                    verb: Some(verb.as_str().into()),
                    namespace: Some(namespace.into()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let api: Api<SubjectAccessReview> = Api::all(self.client.clone());
        let out = api
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| AuthError::Backend(format!("SubjectAccessReview: {e}")))?;
        Ok(out.status.map(|s| s.allowed).unwrap_or(false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn different_questions_never_share_a_cache_key() {
        let who = |user: &str, groups: &[&str]| Identity {
            principal: Principal {
                username: user.into(),
                uid: None,
                groups: groups.iter().map(|g| g.to_string()).collect(),
            },
            namespace: None,
            extra: Default::default(),
        };
        let ab = who("alice", &["a", "b"]);
        let base = question(&ab, Verb::Get, Resource::Runs, "team-a");
        assert_eq!(base, question(&ab, Verb::Get, Resource::Runs, "team-a"));
        let mut with_uid = ab.clone();
        with_uid.principal.uid = Some(String::new());
        let mut with_extra = ab.clone();
        with_extra.extra.insert("scopes".into(), vec!["x".into()]);
        for other in [
            question(&who("alice", &["ab"]), Verb::Get, Resource::Runs, "team-a"),
            question(
                &who("alic", &["ea", "b"]),
                Verb::Get,
                Resource::Runs,
                "team-a",
            ),
            question(&with_uid, Verb::Get, Resource::Runs, "team-a"),
            question(&with_extra, Verb::Get, Resource::Runs, "team-a"),
            question(&ab, Verb::Update, Resource::Runs, "team-a"),
            question(&ab, Verb::Get, Resource::Workflows, "team-a"),
            question(&ab, Verb::Get, Resource::Runs, "team-b"),
        ] {
            assert_ne!(base, other);
        }
    }

    #[test]
    fn a_full_cache_drops_its_oldest_entries_not_all() {
        let c: Cache<usize, bool> = Cache::new(Duration::from_secs(60));
        for i in 0..MAX_ENTRIES {
            c.put(i, true);
        }
        c.put(MAX_ENTRIES, true);
        assert_eq!(c.len(), MAX_ENTRIES - MAX_ENTRIES / 10 + 1);
        let value = |k| c.get(&k).map(|(_, v)| v);
        assert_eq!(value(0), None, "the oldest made room");
        assert_eq!(value(MAX_ENTRIES - 1), Some(true), "the newest stayed");
        assert_eq!(value(MAX_ENTRIES), Some(true));
    }

    #[tokio::test]
    async fn a_remembered_answer_is_not_carried_in_a_reviews_future() {
        // Every `tasks/get` on a replica asks both questions; a hit inside a future sized for
        // the review it did not send allocated and touched kilobytes per request.
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = Client::try_from(config).expect("client");
        let auth = KubeAuth::new(client, vec![], Duration::from_secs(60), Metrics::new());
        let who = Identity {
            principal: Principal {
                username: "alice".into(),
                uid: None,
                groups: vec![],
            },
            namespace: None,
            extra: Default::default(),
        };
        let authenticate = auth.authenticate(Some("token"));
        let authenticate_until = auth.authenticate_until(Some("token"));
        let allowed = auth.allowed(&who, Verb::Get, Resource::Runs, "team-a");
        for (what, size) in [
            ("authenticate", size_of_val(&*authenticate)),
            ("authenticate_until", size_of_val(&*authenticate_until)),
            ("allowed", size_of_val(&*allowed)),
        ] {
            assert!(size <= 512, "{what}'s future is {size} bytes");
        }
    }

    #[tokio::test]
    async fn callers_that_miss_together_share_one_review() {
        let c: Arc<Cache<&str, u32>> = Arc::new(Cache::new(Duration::from_secs(60)));
        let reviews = Arc::new(std::sync::atomic::AtomicU32::new(0));
        let answer = Arc::new(tokio::sync::Notify::new());
        let asking: Vec<_> = (0..16)
            .map(|_| {
                let (c, reviews, answer) = (c.clone(), reviews.clone(), answer.clone());
                tokio::spawn(async move {
                    c.get_or_fetch("alice", || async move {
                        reviews.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        answer.notified().await;
                        Ok::<_, ()>(7)
                    })
                    .await
                })
            })
            .collect();
        // Every caller missed and waits on the one review (the map holds its cell too).
        let waiting = || {
            c.pending
                .lock()
                .unwrap()
                .get("alice")
                .map_or(0, Arc::strong_count)
        };
        while waiting() < 17 {
            tokio::task::yield_now().await;
        }
        answer.notify_one();
        let mut fetched = 0;
        let mut got_at = std::collections::HashSet::new();
        for a in asking {
            let answer = a.await.unwrap().unwrap();
            assert_eq!(answer.value, 7);
            fetched += usize::from(answer.fetched);
            got_at.insert(answer.at);
        }
        assert_eq!(reviews.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(fetched, 1);
        let cached = c.get(&"alice");
        assert_eq!(cached.map(|(_, v)| v), Some(7), "the answer is cached");
        assert_eq!(
            got_at.into_iter().collect::<Vec<_>>(),
            vec![cached.unwrap().0],
            "every waiter learns when the cache got it, so that no copy outlives it"
        );
        assert!(c.pending.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_failed_review_is_not_cached_and_the_next_caller_asks_again() {
        let c: Cache<&str, u32> = Cache::new(Duration::from_secs(60));
        let ask = |v: Result<u32, &'static str>| {
            let c = &c;
            async move {
                c.get_or_fetch("bob", || async move { v })
                    .await
                    .map(|a| (a.value, a.fetched))
            }
        };
        assert_eq!(ask(Err("down")).await, Err("down"));
        assert!(c.get(&"bob").is_none());
        assert_eq!(ask(Ok(3)).await, Ok((3, true)));
        assert_eq!(ask(Ok(4)).await, Ok((3, false)), "answered from the cache");
    }

    #[test]
    fn service_account_names_give_their_namespace() {
        assert_eq!(
            service_account_namespace("system:serviceaccount:team-a:agent"),
            Some("team-a")
        );
        assert_eq!(service_account_namespace("alice"), None);
        assert_eq!(service_account_namespace("system:serviceaccount::x"), None);
    }
}
