//! Who is calling and what they may do. `Authenticator` turns a bearer token into a principal;
//! `Authorizer` answers "may this principal `<verb>` `<resource>` in `<namespace>`?". The embedded
//! store uses a token file (or no auth on loopback); the Kubernetes store uses TokenReview and
//! SubjectAccessReview behind the same traits.

pub mod connection;
pub mod file;
pub mod kube;
mod memo;

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;

use crate::api::Principal;

/// Resources authorization is asked about (group `runway.dev`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Resource {
    /// `runs`.
    Runs,
    /// `workflows`.
    Workflows,
}

impl Resource {
    /// The plural resource name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Runs => "runs",
            Self::Workflows => "workflows",
        }
    }
}

/// Kubernetes verbs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `get`.
    Get,
    /// `list`.
    List,
    /// `watch`.
    Watch,
    /// `create`.
    Create,
    /// `update`.
    Update,
}

impl Verb {
    /// The verb as Kubernetes spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Get => "get",
            Self::List => "list",
            Self::Watch => "watch",
            Self::Create => "create",
            Self::Update => "update",
        }
    }
}

/// An authenticated caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The principal.
    pub principal: Principal,
    /// Namespace `POST /mcp` serves for this caller, if it has one.
    pub namespace: Option<String>,
    /// Extra attributes the authenticator gave (Kubernetes `user.extra`, e.g. scopes); passed on
    /// to access reviews, which may decide on them.
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// Authentication and authorization failures.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum AuthError {
    /// No credentials, or credentials that are not valid.
    #[error("unauthenticated: {0}")]
    Unauthenticated(String),
    /// The authority could not be asked.
    #[error("authorization backend: {0}")]
    Backend(String),
}

/// Bearer token → identity.
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// Authenticate a request's bearer token (`None` when the header is missing). Shared: a
    /// known caller's identity is built once, not per request.
    async fn authenticate(&self, token: Option<&str>) -> Result<Arc<Identity>, AuthError>;

    /// [`Self::authenticate`], with the instant until which the same token may be taken for the
    /// same identity without asking again: when the answer it gave expires (`None`: ask each
    /// time, as an authenticator whose answers are cheap does).
    async fn authenticate_until(
        &self,
        token: Option<&str>,
    ) -> Result<(Arc<Identity>, Option<Instant>), AuthError> {
        Ok((self.authenticate(token).await?, None))
    }
}

/// Access decisions.
#[async_trait]
pub trait Authorizer: Send + Sync + 'static {
    /// Whether `who` may `verb` `resource` in `namespace`.
    async fn allowed(
        &self,
        who: &Identity,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, AuthError>;
}

/// Principal of unauthenticated loopback use (`--no-auth`).
pub(crate) const ANONYMOUS: &str = "anonymous";

/// `--no-auth`: everyone is `anonymous` in the configured namespace, and may do anything.
pub(crate) struct NoAuth {
    anonymous: Arc<Identity>,
}

impl NoAuth {
    /// Everyone is `anonymous` in `namespace`.
    pub fn new(namespace: String) -> Self {
        Self {
            anonymous: Arc::new(Identity {
                principal: Principal {
                    username: ANONYMOUS.into(),
                    uid: None,
                    groups: vec![],
                },
                namespace: Some(namespace),
                extra: Default::default(),
            }),
        }
    }
}

#[async_trait]
impl Authenticator for NoAuth {
    async fn authenticate(&self, _token: Option<&str>) -> Result<Arc<Identity>, AuthError> {
        Ok(Arc::clone(&self.anonymous))
    }
}

#[async_trait]
impl Authorizer for NoAuth {
    async fn allowed(
        &self,
        _: &Identity,
        _: Verb,
        _: Resource,
        _: &str,
    ) -> Result<bool, AuthError> {
        Ok(true)
    }
}
