//! The token file of the embedded store: tokens → identities, rules → permissions, and the
//! secrets that `valueFrom.secretKeyRef` headers read.
//!
//! ```yaml
//! tokens:
//!   - { token: s3cret, user: alice, groups: [dev], namespace: team-a }
//! rules:
//!   - { users: [alice], groups: [], namespaces: [team-a], resources: [runs, workflows], verbs: ["*"] }
//! secrets:
//!   team-a/webhook: { token: abc }
//! ```

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use constant_time_eq::constant_time_eq;
use serde::Deserialize;

use super::{AuthError, Authenticator, Authorizer, Identity, Resource, Verb};
use crate::api::Principal;

/// Wildcard in rules.
const ANY: &str = "*";
/// Verbs a rule may name (the ones Runway asks about, and the wildcard).
const VERBS: [&str; 6] = ["get", "list", "watch", "create", "update", ANY];
/// Resources a rule may name.
const RESOURCES: [&str; 3] = ["runs", "workflows", ANY];

/// The parsed file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthFile {
    /// Known tokens.
    #[serde(default)]
    pub tokens: Vec<TokenEntry>,
    /// Permission rules; a request is allowed when any rule matches.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Secrets by `namespace/name` (or `name` for every namespace): key → value.
    #[serde(default)]
    pub secrets: BTreeMap<String, BTreeMap<String, String>>,
    /// The identity of each entry of `tokens`, built once by `parse`.
    #[serde(skip)]
    identities: Vec<Arc<Identity>>,
}

/// A token and who it is.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TokenEntry {
    /// The bearer token.
    pub token: String,
    /// User name.
    pub user: String,
    /// Stable user id.
    #[serde(default)]
    pub uid: Option<String>,
    /// Groups.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Namespace `POST /mcp` serves for this user.
    #[serde(default)]
    pub namespace: Option<String>,
}

/// Who may do what where.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    /// Users the rule applies to.
    #[serde(default)]
    pub users: Vec<String>,
    /// Groups the rule applies to.
    #[serde(default)]
    pub groups: Vec<String>,
    /// Namespaces (`*` for all).
    pub namespaces: Vec<String>,
    /// `runs`, `workflows` or `*`.
    pub resources: Vec<String>,
    /// Verbs or `*`.
    pub verbs: Vec<String>,
}

/// Errors reading the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FileError {
    /// Unreadable.
    #[error("cannot read {0}: {1}")]
    Read(String, std::io::Error),
    /// Not valid.
    #[error("invalid auth file {0}: {1}")]
    Parse(String, String),
}

impl AuthFile {
    /// Read and parse a file.
    pub fn load(path: &Path) -> Result<Self, FileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| FileError::Read(path.display().to_string(), e))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Parse and check the text of a file called `name` (for messages).
    pub fn parse(text: &str, name: &str) -> Result<Self, FileError> {
        let mut file: AuthFile = serde_saphyr::from_str(text)
            .map_err(|e| FileError::Parse(name.to_owned(), e.to_string()))?;
        let bad = |m: String| FileError::Parse(name.to_owned(), m);
        for t in &file.tokens {
            if t.token.is_empty() || t.user.is_empty() {
                return Err(bad("a token entry needs token and user".into()));
            }
        }
        // A misspelt verb or resource would never match: refuse it rather than deny silently.
        for (i, r) in file.rules.iter().enumerate() {
            if let Some(v) = r.verbs.iter().find(|v| !VERBS.contains(&v.as_str())) {
                return Err(bad(format!(
                    "rules[{i}]: unknown verb {v:?} (one of {})",
                    VERBS.join(", ")
                )));
            }
            if let Some(x) = r
                .resources
                .iter()
                .find(|x| !RESOURCES.contains(&x.as_str()))
            {
                return Err(bad(format!(
                    "rules[{i}]: unknown resource {x:?} (one of {})",
                    RESOURCES.join(", ")
                )));
            }
            if r.users.is_empty() && r.groups.is_empty() {
                return Err(bad(format!("rules[{i}]: names no users and no groups")));
            }
        }
        file.identities = file
            .tokens
            .iter()
            .map(|entry| {
                Arc::new(Identity {
                    principal: Principal {
                        username: entry.user.clone(),
                        uid: entry.uid.clone(),
                        groups: entry.groups.clone(),
                    },
                    namespace: entry.namespace.clone(),
                    extra: Default::default(),
                })
            })
            .collect();
        Ok(file)
    }
}

fn matches(list: &[String], value: &str) -> bool {
    list.iter().any(|v| v == ANY || v == value)
}

#[async_trait]
impl Authenticator for AuthFile {
    async fn authenticate(&self, token: Option<&str>) -> Result<Arc<Identity>, AuthError> {
        let token =
            token.ok_or_else(|| AuthError::Unauthenticated("missing bearer token".into()))?;
        // Zipped, not indexed: a file whose identities were not built denies every token
        // instead of panicking.
        self.tokens
            .iter()
            .zip(&self.identities)
            .find(|(t, _)| constant_time_eq(t.token.as_bytes(), token.as_bytes()))
            .map(|(_, identity)| Arc::clone(identity))
            .ok_or_else(|| AuthError::Unauthenticated("unknown bearer token".into()))
    }
}

#[async_trait]
impl Authorizer for AuthFile {
    async fn allowed(
        &self,
        who: &Identity,
        verb: Verb,
        resource: Resource,
        namespace: &str,
    ) -> Result<bool, AuthError> {
        let p = &who.principal;
        Ok(self.rules.iter().any(|r| {
            (r.users.iter().any(|u| u == ANY || *u == p.username)
                || r.groups.iter().any(|g| p.groups.contains(g)))
                && matches(&r.namespaces, namespace)
                && matches(&r.resources, resource.as_str())
                && matches(&r.verbs, verb.as_str())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_example_loads_and_typos_are_refused() {
        let doc = include_str!("../../docs/auth-file.md");
        let example = doc
            .split("```yaml\n")
            .nth(1)
            .and_then(|rest| rest.split("```").next())
            .expect("docs/auth-file.md has a YAML example");
        let f = AuthFile::parse(example, "example").unwrap();
        assert_eq!(f.tokens.len(), 3);
        assert_eq!(f.secrets["team-a/webhook"]["token"], "s3cr3t");
        for (bad, why) in [
            (
                example.replace("verbs: [list]", "verbs: [lsit]"),
                "unknown verb \"lsit\"",
            ),
            (
                example.replace("resources: [workflows]", "resources: [workflow]"),
                "unknown resource",
            ),
            (
                example.replace("{ users: [carol], ", "{ "),
                "names no users and no groups",
            ),
            (example.replace("user: alice", "usr: alice"), "usr"),
        ] {
            let e = AuthFile::parse(&bad, "f").unwrap_err().to_string();
            assert!(e.contains(why), "{e}");
        }
    }

    fn file() -> AuthFile {
        AuthFile::parse(
            r#"
tokens:
  - { token: a, user: alice, groups: [dev], namespace: team-a }
  - { token: o, user: olga, groups: [ops] }
rules:
  - { users: [alice], namespaces: [team-a], resources: [runs], verbs: [get, create] }
  - { groups: [ops], namespaces: ["*"], resources: ["*"], verbs: ["*"] }
"#,
            "f",
        )
        .unwrap()
    }

    #[tokio::test]
    async fn tokens_map_to_identities() {
        let f = file();
        let id = f.authenticate(Some("a")).await.unwrap();
        assert_eq!(id.principal.username, "alice");
        assert_eq!(id.namespace.as_deref(), Some("team-a"));
        assert!(matches!(
            f.authenticate(Some("zzz")).await,
            Err(AuthError::Unauthenticated(_))
        ));
        assert!(matches!(
            f.authenticate(None).await,
            Err(AuthError::Unauthenticated(_))
        ));
    }

    #[tokio::test]
    async fn rules_grant_by_user_group_namespace_resource_and_verb() {
        let f = file();
        let alice = f.authenticate(Some("a")).await.unwrap();
        let olga = f.authenticate(Some("o")).await.unwrap();
        assert!(
            f.allowed(&alice, Verb::Create, Resource::Runs, "team-a")
                .await
                .unwrap()
        );
        assert!(
            !f.allowed(&alice, Verb::Update, Resource::Runs, "team-a")
                .await
                .unwrap()
        );
        assert!(
            !f.allowed(&alice, Verb::Create, Resource::Runs, "team-b")
                .await
                .unwrap()
        );
        assert!(
            !f.allowed(&alice, Verb::List, Resource::Workflows, "team-a")
                .await
                .unwrap()
        );
        assert!(
            f.allowed(&olga, Verb::List, Resource::Workflows, "anywhere")
                .await
                .unwrap()
        );
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let dir = std::env::temp_dir().join(format!("runway-auth-{}", std::process::id()));
        std::fs::write(&dir, "tokenz: []\n").unwrap();
        let err = AuthFile::load(&dir).unwrap_err().to_string();
        assert!(err.contains("tokenz"), "{err}");
        let _ = std::fs::remove_file(&dir);
    }
}
