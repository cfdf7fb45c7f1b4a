//! Workflows and Secrets from the cluster: the Workflow reflector the controller and the MCP
//! endpoint read tools from, and the Secrets a step's headers name.

use std::sync::Arc;

use async_trait::async_trait;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use tokio::sync::watch;

use super::kube::map_err;
use super::{SecretSource, StoreError, WorkflowSource};
use crate::api::Workflow;

/// Workflows from the cluster, read through a reflector.
#[derive(Clone)]
pub struct KubeWorkflows {
    workflows: Store<Workflow>,
    changes: watch::Sender<u64>,
}

impl KubeWorkflows {
    /// Start the Workflow reflector and wait for its first list.
    pub async fn start(client: Client) -> Result<Self, StoreError> {
        let (reader, writer) = reflector::store();
        let api: Api<Workflow> = Api::all(client);
        let (changes, _) = watch::channel(0u64);
        let tx = changes.clone();
        let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
            .default_backoff()
            .touched_objects();
        let last_error = super::fill::follow(stream, "Workflow", move || {
            tx.send_modify(|v| *v += 1);
        });
        super::fill::filled(&reader, "Workflow", &last_error).await?;
        Ok(Self {
            workflows: reader,
            changes,
        })
    }

    /// Every Workflow in the cache.
    pub fn all(&self) -> Vec<Arc<Workflow>> {
        self.workflows.state()
    }
}

#[async_trait]
impl WorkflowSource for KubeWorkflows {
    async fn get(&self, namespace: &str, name: &str) -> Option<Workflow> {
        self.workflows
            .get(&ObjectRef::new(name).within(namespace))
            .map(|w| (*w).clone())
    }

    async fn list(&self, namespace: &str) -> Vec<Workflow> {
        let mut out: Vec<Workflow> = self
            .workflows
            .state()
            .iter()
            .filter(|w| w.metadata.namespace.as_deref() == Some(namespace))
            .map(|w| (**w).clone())
            .collect();
        out.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        out
    }

    async fn namespaces(&self) -> Vec<String> {
        let all: std::collections::BTreeSet<String> = self
            .workflows
            .state()
            .iter()
            .filter_map(|w| w.metadata.namespace.clone())
            .collect();
        all.into_iter().collect()
    }

    /// The Ready Workflow offering tool `name`; of two (for the moment between one taking a
    /// name another holds and the validator's verdict on it), the one the validator keeps —
    /// the oldest, then by name — so that every replica calls the same.
    async fn tool(&self, namespace: &str, name: &str) -> Option<Arc<Workflow>> {
        let offering = self.workflows.state().into_iter().filter(|w| {
            w.metadata.namespace.as_deref() == Some(namespace)
                && w.is_ready()
                && w.tool_name() == name
        });
        offering.min_by(|a, b| a.seniority().cmp(&b.seniority()))
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }
}

/// Values of Secrets in the Run's namespace.
#[derive(Clone)]
pub struct KubeSecrets {
    client: Client,
}

impl KubeSecrets {
    /// Secrets through `client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }
}

#[async_trait]
impl SecretSource for KubeSecrets {
    async fn get(&self, namespace: &str, name: &str, key: &str) -> Result<String, StoreError> {
        let api: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), namespace);
        let secret = api.get(name).await.map_err(map_err)?;
        let bytes = secret
            .data
            .and_then(|d| d.get(key).cloned())
            .ok_or(StoreError::NotFound)?;
        String::from_utf8(bytes.0)
            .map_err(|_| StoreError::Invalid(format!("secret {name}/{key} is not UTF-8")))
    }
}
