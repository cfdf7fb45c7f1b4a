//! Identity and access from the cluster: TokenReview authenticates bearer tokens and
//! SubjectAccessReview answers access questions (group `runway.dev`). Both are cached briefly —
//! by a hash of the token, and by user, groups, verb, resource and namespace.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::{Api, Client};
use sha2::{Digest, Sha256};

use super::{AuthError, Authenticator, Authorizer, Identity, Resource, Verb};
use crate::api::{GROUP, Principal};
use crate::telemetry::Metrics;

/// Prefix of ServiceAccount user names.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";
/// Most entries a cache keeps before it is cleared.
const MAX_ENTRIES: usize = 10_000;

struct Cache<K, V> {
    ttl: Duration,
    entries: Mutex<HashMap<K, (Instant, V)>>,
}

impl<K: Eq + Hash, V: Clone> Cache<K, V> {
    fn new(ttl: Duration) -> Self {
        Self {
            ttl,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn get(&self, k: &K) -> Option<V> {
        let entries = self.entries.lock().expect("cache lock");
        entries
            .get(k)
            .filter(|(at, _)| at.elapsed() < self.ttl)
            .map(|(_, v)| v.clone())
    }

    fn put(&self, k: K, v: V) {
        let mut entries = self.entries.lock().expect("cache lock");
        if entries.len() >= MAX_ENTRIES {
            entries.retain(|_, (at, _)| at.elapsed() < self.ttl);
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
        }
        entries.insert(k, (Instant::now(), v));
    }
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
    tokens: Cache<[u8; 32], Option<Identity>>,
    decisions: Cache<u64, bool>,
    metrics: Metrics,
}

impl KubeAuth {
    /// Reviews through `client`, cached for `ttl`.
    pub fn new(client: Client, audiences: Vec<String>, ttl: Duration, metrics: Metrics) -> Self {
        Self {
            client,
            audiences,
            tokens: Cache::new(ttl),
            decisions: Cache::new(ttl),
            metrics,
        }
    }
}

#[async_trait]
impl Authenticator for KubeAuth {
    async fn authenticate(&self, token: Option<&str>) -> Result<Identity, AuthError> {
        let token =
            token.ok_or_else(|| AuthError::Unauthenticated("missing bearer token".into()))?;
        let key: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        let cached = self.tokens.get(&key);
        self.metrics.auth_cache("token", cached.is_some());
        let identity = match cached {
            Some(i) => i,
            None => {
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
                let identity = match (status.authenticated, status.user) {
                    (Some(true), Some(user)) => {
                        let username = user.username.unwrap_or_default();
                        let namespace = service_account_namespace(&username).map(str::to_owned);
                        Some(Identity {
                            principal: Principal {
                                username,
                                uid: user.uid,
                                groups: user.groups.unwrap_or_default(),
                            },
                            namespace,
                        })
                    }
                    _ => None,
                };
                self.tokens.put(key, identity.clone());
                identity
            }
        };
        identity.ok_or_else(|| AuthError::Unauthenticated("token rejected".into()))
    }
}

#[async_trait]
impl Authorizer for KubeAuth {
    async fn allowed(
        &self,
        p: &Principal,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            &p.username,
            &p.uid,
            &p.groups,
            verb.as_str(),
            resource.as_str(),
            namespace,
        )
            .hash(&mut h);
        let key = h.finish();
        let cached = self.decisions.get(&key);
        self.metrics.auth_cache("access", cached.is_some());
        if let Some(d) = cached {
            return Ok(d);
        }
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(p.username.clone()),
                uid: p.uid.clone(),
                groups: (!p.groups.is_empty()).then(|| p.groups.clone()),
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
        let allowed = out.status.map(|s| s.allowed).unwrap_or(false);
        self.decisions.put(key, allowed);
        Ok(allowed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
