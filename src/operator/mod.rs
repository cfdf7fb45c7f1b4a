//! `runway operator`: the Kubernetes form of Runway. Every replica serves MCP; the Run
//! controller runs in the replicas that hold shard Leases (see [`lease`]) — with one shard, the
//! elected leader — and the Workflow validator with the first shard.

mod events;
pub mod lease;
mod workflows;

pub(crate) use events::{KubeEventLog, KubeEvents};

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

use crate::auth::kube::KubeAuth;
use crate::controller::schedules::Scheduler;
use crate::controller::{self, Controller};
use crate::engine::marks::Marks;
use crate::mcp;
use crate::steps::job::JobExecutor;
use crate::steps::{Executors, tool::ToolExecutor};
use crate::store::RunChanges;
use crate::store::archive::keeper::Archiver;
use crate::store::events::EventLog;
use crate::store::kube::KubeStore;
use crate::store::kube_sources::{KubeSecrets, KubeWorkflows};
use crate::telemetry::Metrics;

/// Settings of the operator.
#[derive(Debug, Clone)]
pub struct Options {
    /// MCP endpoint address.
    pub listen: SocketAddr,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub metrics_listen: SocketAddr,
    /// Run the controller only for the shards whose Leases this replica holds (without: for
    /// every Run, a single replica only).
    pub leader_election: bool,
    /// The shard Leases: names, namespace (also the state key Secret's), this replica's
    /// identity, shard count and timings.
    pub lease: lease::Settings,
    /// TokenReview audiences.
    pub audiences: Vec<String>,
    /// How long authentication and authorization answers are cached.
    pub auth_cache_ttl: Duration,
    /// Runs reconciled at once.
    pub workers: usize,
    /// MCP endpoint settings. Without state keys, they come from `state_key_secret`.
    pub mcp: mcp::Config,
    /// Where `http` and `tool` steps may connect.
    pub egress: crate::steps::egress::Egress,
    /// Secret (in the Leases' namespace, key `state-key`) holding the state keys when `mcp` has
    /// none; read, or created once when missing, so every replica uses the same keys.
    pub state_key_secret: String,
    /// Where finished Runs are archived before they are deleted.
    pub archive: crate::store::archive::keeper::Settings,
    /// Write a Kubernetes Event for every step's progress (started, succeeded, skipped,
    /// stopped, reused); without, only a Run's own Events and warnings are written.
    pub step_events: bool,
}

/// How long the controller may take to stop once told to: its drain, then abandoning what is
/// left.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Key of the state keys within their Secret (the chart's `stateKey.key` default).
pub(crate) const STATE_KEY_FIELD: &str = "state-key";

/// Read the state keys from `name`, or create it with a new key. Replicas racing to create it
/// all end up with the winner's key: a losing create (409) reads what won.
async fn state_keys_from_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Vec<Vec<u8>>, OperatorError> {
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let fail = |e: String| {
        OperatorError::Start(format!(
            "state key Secret {namespace}/{name}: {e} (give --state-key-file, or let the operator \
             get and create Secrets in {namespace})"
        ))
    };
    for _ in 0..3 {
        if let Some(secret) = api.get_opt(name).await.map_err(|e| fail(e.to_string()))? {
            let data = secret
                .data
                .as_ref()
                .and_then(|d| d.get(STATE_KEY_FIELD))
                .ok_or_else(|| fail(format!("has no key {STATE_KEY_FIELD}")))?;
            return mcp::parse_state_keys(&data.0).map_err(|e| fail(e.to_string()));
        }
        let mut secret = Secret::default();
        secret.metadata.name = Some(name.to_owned());
        secret.data = Some(
            [(
                STATE_KEY_FIELD.to_owned(),
                ByteString(crate::store::new_state_key()),
            )]
            .into_iter()
            .collect(),
        );
        match api.create(&Default::default(), &secret).await {
            Ok(_) => tracing::info!(namespace, secret = name, "created the state key Secret"),
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(fail(e.to_string())),
        }
    }
    Err(fail("it keeps disappearing".into()))
}

/// Why the operator stopped.
#[derive(Debug, thiserror::Error)]
pub enum OperatorError {
    /// No cluster configuration (in-cluster or kubeconfig).
    #[error("cannot configure a Kubernetes client: {0}")]
    Config(String),
    /// The API server could not be used at start.
    #[error("cannot start: {0}")]
    Start(String),
    /// An address cannot be bound.
    #[error("cannot listen on {0}: {1}")]
    Listen(SocketAddr, std::io::Error),
}

/// What every shard leader of this process shares: the API server, the stores, and the one
/// feed of Run changes.
#[derive(Clone)]
struct Cluster {
    client: Client,
    store: KubeStore,
    workflows: KubeWorkflows,
    changes: RunChanges,
    /// The key of scheduled Run names (the first state key).
    name_key: Vec<u8>,
    /// The seals on what the operator creates (child Runs, scheduled Runs, Jobs).
    marks: Marks,
    /// Where finished Runs go before they are deleted.
    archive: Option<Arc<Archiver>>,
}

/// The step executors of a shard leader: steps read Secrets, call upstreams, run Jobs and
/// child Runs on this cluster.
fn executors(
    client: &Client,
    store: &KubeStore,
    changes: RunChanges,
    marks: &Marks,
    opts: &Options,
) -> Executors {
    Executors::new(Arc::new(KubeSecrets::new(client.clone())), &opts.egress)
        .with_tool(Arc::new(ToolExecutor::new(
            Arc::new(KubeSecrets::new(client.clone())),
            &opts.egress,
        )))
        .with_jobs(Arc::new(JobExecutor::new(client.clone(), marks.clone())))
        .with_children(Arc::new(crate::steps::child::ChildExecutor::new(
            Arc::new(store.clone()),
            changes,
            marks.clone(),
        )))
}

/// Drive the Runs of `shards` until `stop`, and validate Workflows when the first shard is
/// among them.
async fn lead(
    cluster: Cluster,
    opts: &Options,
    metrics: Metrics,
    shards: controller::Shards,
    stop: CancellationToken,
) {
    let Cluster {
        client,
        store,
        workflows,
        changes,
        name_key,
        marks,
        archive,
    } = cluster;
    let validates = shards.owned.contains(&0);
    let executors = executors(&client, &store, changes, &marks, opts);
    let events = Arc::new(KubeEvents::new(
        client.clone(),
        opts.lease.identity.clone(),
        opts.step_events,
        metrics.clone(),
    ));
    // Schedules are started where Workflows are validated (the first shard): one scheduler.
    let scheduler = Scheduler::new(
        Arc::new(store.clone()),
        Arc::new(workflows.clone()),
        events.clone(),
        name_key,
        marks.clone(),
    )
    .with_archive(archive.clone(), metrics.clone());
    let ctl = Controller::new(
        Arc::new(store),
        Arc::new(workflows.clone()),
        Arc::new(executors),
        events,
        controller::Config {
            workers: opts.workers,
            workers_per_namespace: 0,
            metrics,
            shards,
            marks,
            archive,
            drain: drain(opts),
        },
    );
    let validator = workflows::validator(client, workflows.clone(), stop.clone());
    let work = async {
        if validates {
            tokio::join!(
                ctl.run(stop.clone()),
                validator,
                scheduler.run(stop.clone())
            );
        } else {
            ctl.run(stop.clone()).await;
        }
    };
    // Once told to stop, in-flight work gets a moment to finish and is then dropped (a Run
    // resumes from its status wherever it is driven next): a request the API server never
    // answers must not keep a shard from being handed over.
    let deadline = async {
        stop.cancelled().await;
        tokio::time::sleep(STOP_GRACE).await;
    };
    tokio::select! {
        _ = work => {}
        _ = deadline => tracing::warn!("the controller did not stop within {STOP_GRACE:?}; abandoning its work"),
    }
}

/// How long the controller, told to stop, lets its effects in progress finish and be written:
/// with Leases, within half the time between a holder giving a shard up (its renew deadline)
/// and another replica able to take it (the Lease's duration), so that no write of the old
/// term lands in the new one.
fn drain(opts: &Options) -> Duration {
    if !opts.leader_election {
        return controller::DRAIN;
    }
    drain_within(opts.lease.duration, opts.lease.renew_deadline)
}

/// The drain for Leases of `duration` given up at `renew_deadline`.
fn drain_within(duration: Duration, renew_deadline: Duration) -> Duration {
    controller::DRAIN.min(duration.saturating_sub(renew_deadline) / 2)
}

/// Start the operator with the in-cluster configuration or kubeconfig, and run until `shutdown`.
pub async fn run(opts: Options, shutdown: CancellationToken) -> Result<(), OperatorError> {
    let client = Client::try_default()
        .await
        .map_err(|e| OperatorError::Config(e.to_string()))?;
    run_with(client, opts, shutdown).await
}

/// The MCP endpoint's settings, with the state keys from their Secret when none were given.
async fn endpoint_config(
    client: &Client,
    opts: &Options,
    metrics: &Metrics,
) -> Result<mcp::Config, OperatorError> {
    let mut config = opts.mcp.clone();
    config.metrics = metrics.clone();
    if config.state_keys.is_empty() {
        config.state_keys =
            state_keys_from_secret(client, &opts.lease.namespace, &opts.state_key_secret).await?;
    }
    Ok(config)
}

/// Listen on `addr`, and the address bound (the port, when `addr` asked for any).
async fn bind(addr: SocketAddr) -> Result<(tokio::net::TcpListener, SocketAddr), OperatorError> {
    let listen = |e| OperatorError::Listen(addr, e);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(listen)?;
    let bound = listener.local_addr().map_err(listen)?;
    Ok((listener, bound))
}

/// Start the operator with `client`, and run until `shutdown`.
pub async fn run_with(
    client: Client,
    opts: Options,
    shutdown: CancellationToken,
) -> Result<(), OperatorError> {
    let metrics = Metrics::new();
    let store = KubeStore::start(client.clone())
        .await
        .map_err(|e| OperatorError::Start(e.to_string()))?;
    let workflows = KubeWorkflows::start(client.clone())
        .await
        .map_err(|e| OperatorError::Start(e.to_string()))?;
    let auth = Arc::new(KubeAuth::new(
        client.clone(),
        opts.audiences.clone(),
        opts.auth_cache_ttl,
        metrics.clone(),
    ));
    let mut mcp_config = endpoint_config(&client, &opts, &metrics).await?;
    let name_key = mcp_config.state_keys.first().cloned().unwrap_or_default();
    let marks = Marks::new(mcp_config.state_keys.clone());
    let event_log: Arc<dyn EventLog> = Arc::new(KubeEventLog {
        client: client.clone(),
    });
    let archive = opts
        .archive
        .open(event_log.clone())
        .await
        .map_err(|e| OperatorError::Start(e.to_string()))?;
    mcp_config.archive = archive.clone();
    let state = mcp::McpState::new(
        Arc::new(store.clone()),
        Arc::new(workflows.clone()),
        auth.clone(),
        auth,
        event_log,
        mcp_config,
        shutdown.clone(),
    )
    .map_err(|e| OperatorError::Start(e.to_string()))?;
    let changes = state.events.clone();
    let (mcp_listener, mcp_addr) = bind(opts.listen).await?;
    let (metrics_listener, metrics_addr) = bind(opts.metrics_listen).await?;
    let mut tasks = tokio::task::JoinSet::new();
    let token = shutdown.clone();
    tasks.spawn(async move {
        let app = mcp::router(state);
        crate::endpoint::serve(mcp_listener, app, token).await;
    });
    let token = shutdown.clone();
    let app = crate::endpoint::health_and_metrics(Arc::new(store.clone()), metrics.clone());
    tasks.spawn(crate::endpoint::serve(metrics_listener, app, token));
    if let Some(a) = archive.clone() {
        tasks.spawn(a.prune_until(shutdown.clone()));
    }
    tracing::info!(mcp = %mcp_addr, metrics = %metrics_addr, "runway operator started");

    let cluster = Cluster {
        client,
        store,
        workflows,
        changes,
        name_key,
        marks,
        archive,
    };
    if opts.leader_election {
        drive_owned_shards(cluster, &opts, metrics, &shutdown).await;
    } else {
        let all = controller::Shards::all();
        metrics.set_shards(1, 1);
        lead(cluster, &opts, metrics, all, shutdown.clone()).await;
    }
    shutdown.cancel();
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Run the controller for the shards this replica holds, restarting it whenever they change,
/// until `shutdown`; then let the Leases go.
async fn drive_owned_shards(
    cluster: Cluster,
    opts: &Options,
    metrics: Metrics,
    shutdown: &CancellationToken,
) {
    let (elector, follow) = lease::Elector::start(cluster.client.clone(), opts.lease.clone());
    let none = controller::Shards {
        count: opts.lease.shards,
        owned: Default::default(),
    };
    let (owned_tx, mut owned) = tokio::sync::watch::channel(none);
    let (running_tx, running) = tokio::sync::watch::channel(std::collections::BTreeSet::new());
    let follow = tokio::spawn(follow);
    let elect = tokio::spawn(elector.run(owned_tx, running, shutdown.clone()));
    loop {
        let shards = owned.borrow_and_update().clone();
        metrics.set_shards(shards.count, shards.owned.len());
        if !shards.owned.is_empty() {
            tracing::info!(identity = %opts.lease.identity, shards = ?shards.owned, of = shards.count, "driving the Runs of these shards");
            running_tx.send_replace(shards.owned.clone());
            let stop = shutdown.child_token();
            let until_changed = {
                let (stop, mut owned) = (stop.clone(), owned.clone());
                async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = owned.changed() => stop.cancel(),
                    }
                }
            };
            let (c, m) = (cluster.clone(), metrics.clone());
            tokio::join!(lead(c, opts, m, shards, stop), until_changed);
            running_tx.send_replace(Default::default());
            if !shutdown.is_cancelled() {
                tracing::info!(identity = %opts.lease.identity, "the shards held changed; restarting the controller");
            }
        }
        if shutdown.is_cancelled() {
            break;
        }
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = owned.changed() => if r.is_err() { break },
            // Re-examined at once when the controller was stopped for a change.
            _ = std::future::ready(()), if owned.has_changed().unwrap_or(false) => {}
        }
    }
    running_tx.send_replace(Default::default());
    metrics.set_shards(opts.lease.shards, 0);
    let _ = elect.await;
    follow.abort();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_drains_within_half_the_time_before_another_replica_may_take_the_shard() {
        let s = Duration::from_secs;
        assert_eq!(drain_within(s(15), s(10)), controller::DRAIN);
        assert_eq!(drain_within(s(15), s(13)), s(1));
        assert_eq!(drain_within(s(15), s(15)), Duration::ZERO);
        assert!(drain_within(s(15), s(10)) < STOP_GRACE);
    }
}
