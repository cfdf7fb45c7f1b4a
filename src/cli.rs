//! The `runway` command line: its commands, flags and how flag values parse.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// What `runway --version` prints: the version and the commit of the build.
const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("RUNWAY_COMMIT"),
    ")"
);

/// Runway: Workflows as MCP tools, Runs as durable MCP tasks.
#[derive(Parser)]
#[command(name = "runway", version = LONG_VERSION, about)]
pub(crate) struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// Task commands.
#[derive(Subcommand)]
pub(crate) enum TasksCommand {
    /// Print a task as JSON.
    Get {
        /// Task id.
        id: String,
        /// Read the finished task from the archive, after its Run was deleted: the Run in full
        /// (arguments, steps, answers with who and when, result, Events).
        #[arg(long)]
        archived: bool,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Follow a task's status until it ends (subscriptions/listen).
    Watch {
        /// Task id.
        id: String,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Answer one input request of a task.
    Answer {
        /// Task id.
        id: String,
        /// Input request key (see `runway tasks get`).
        key: String,
        /// Accept with this JSON object as the content.
        #[arg(long, group = "action")]
        accept: Option<String>,
        /// Decline.
        #[arg(long, group = "action")]
        decline: bool,
        /// Dismiss (the question is asked again).
        #[arg(long, group = "action")]
        cancel: bool,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Cancel a task.
    Cancel {
        /// Task id.
        id: String,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Pause a task: steps that run finish, no new step starts until it is resumed.
    Pause {
        /// Task id.
        id: String,
        /// Why (recorded in an Event on the Run).
        #[arg(long)]
        reason: Option<String>,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Resume a paused task (or one paused because a step ran out of retries).
    Resume {
        /// Task id.
        id: String,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Retry a failed or cancelled task of yours from the step that failed: a new task reuses
    /// the outputs of the steps that succeeded. Prints the new task id.
    Retry {
        /// Task id.
        id: String,
        /// An argument to change, `key=value` (JSON when it parses, else a string). Repeatable.
        #[arg(long = "arg", short = 'a')]
        args: Vec<String>,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// List the tasks of the namespace you may see (newest first), as the console does.
    List {
        #[command(flatten)]
        filters: runway::client::ListFilters,
        #[command(flatten)]
        target: TargetFlags,
    },
}

/// Where the client commands connect.
#[derive(clap::Args)]
pub(crate) struct TargetFlags {
    /// MCP endpoint URL.
    #[arg(long, env = "RUNWAY_URL", default_value = "http://127.0.0.1:8080/mcp")]
    pub(crate) url: String,
    /// File holding the bearer token.
    #[arg(long, env = "RUNWAY_TOKEN_FILE")]
    pub(crate) token_file: Option<PathBuf>,
}

impl TargetFlags {
    pub(crate) fn target(&self) -> Result<runway::client::Target, runway::client::ClientError> {
        let token = match &self.token_file {
            Some(f) => Some(
                std::fs::read_to_string(f)
                    .map_err(|e| {
                        runway::client::ClientError::Usage(format!(
                            "cannot read {}: {e}",
                            f.display()
                        ))
                    })?
                    .trim()
                    .to_owned(),
            ),
            None => None,
        };
        Ok(runway::client::Target {
            url: self.url.clone(),
            token,
        })
    }
}

/// Flags of the MCP endpoint, shared by `serve` and `operator`.
#[derive(clap::Args)]
pub(crate) struct McpFlags {
    /// Extra Host names the MCP endpoint accepts (loopback is always accepted), e.g. a Service name.
    #[arg(long = "allowed-host")]
    pub(crate) allowed_hosts: Vec<String>,
    /// Origins accepted on requests that carry `Origin` (`http://host:port`, `:*` for any port).
    #[arg(long = "allowed-origin")]
    pub(crate) allowed_origins: Vec<String>,
    /// An address or CIDR range `http` and `tool` steps may reach even where the egress policy
    /// denies it (link-local and cloud metadata, loopback for `operator`). Repeatable.
    #[arg(long = "egress-allow", value_parser = parse_cidr)]
    pub(crate) egress_allow: Vec<runway::steps::egress::Cidr>,
    /// An address or CIDR range `http` and `tool` steps may not reach (the cluster's pod and
    /// Service ranges, the operator's own address); `--egress-allow` cuts exceptions out of
    /// it. Repeatable.
    #[arg(long = "egress-deny", value_parser = parse_cidr)]
    pub(crate) egress_deny: Vec<runway::steps::egress::Cidr>,
    /// The HTTP proxy `http` and `tool` steps go through. Without it the `HTTP_PROXY`-style
    /// variables are ignored, since a proxy would reach addresses the egress policy denies.
    #[arg(long = "egress-proxy", value_parser = parse_proxy)]
    pub(crate) egress_proxy: Option<String>,
    /// Who may act on a task: its owner (or who may list runs), or anyone the namespace allows.
    #[arg(long, value_enum, default_value_t = runway::mcp::TaskAccess::Owner)]
    pub(crate) task_access: runway::mcp::TaskAccess,
    /// File holding the keys (≥ 32 bytes each, one per line, newest first) that sign
    /// `requestState` and name idempotent Runs; the first signs, the others still verify (key
    /// rotation). The file must exist (it is read, never created). Without the flag: `serve`
    /// keeps a key in its database, `operator` in a Secret.
    #[arg(long)]
    pub(crate) state_key_file: Option<PathBuf>,
    /// How long a `requestState` handed out with an `input_required` answer stays valid: the
    /// time a person has to answer a question asked before the task exists (e.g. 1h, 30m).
    #[arg(long, default_value = "1h", value_parser = parse_positive_duration)]
    pub(crate) request_state_ttl: std::time::Duration,
    /// Do not offer the `runway_list_runs` tool in any namespace.
    #[arg(long)]
    pub(crate) no_list_tool: bool,
    /// Do not offer the `runway_list_runs` tool in this namespace. Repeatable.
    #[arg(long = "no-list-tool-in", value_name = "NAMESPACE", value_parser = parse_namespace)]
    pub(crate) no_list_tool_in: Vec<String>,
    /// Do not serve the web console (`/ui/`).
    #[arg(long)]
    pub(crate) no_console: bool,
    /// How long a blocking call of a 2025-era client (one that opened with `initialize`) that
    /// sent no progress token is held before it is answered with a result naming its Run,
    /// which goes on (most clients give up after 60 s); and how long a Tasks-extension
    /// client's call of a `sync` tool is held before it gets a task.
    #[arg(long, default_value = "50s", value_parser = parse_positive_duration)]
    pub(crate) hold_limit: std::time::Duration,
}

/// Why a flag's value is refused (clap prints it after the flag and the value).
#[derive(Debug, thiserror::Error)]
pub(crate) enum FlagError {
    /// Not a DNS label.
    #[error("not a namespace name (a DNS label)")]
    Namespace,
    /// Not a duration Workflows would accept.
    #[error(transparent)]
    Duration(#[from] runway::engine::duration::DurationError),
    /// A duration the standard library cannot hold.
    #[error("must not be negative")]
    Negative(#[source] jiff::Error),
    /// Zero, where only a positive duration makes sense.
    #[error("must be longer than zero")]
    Zero,
    /// Not an address or CIDR range.
    #[error(transparent)]
    Cidr(#[from] runway::steps::egress::CidrError),
    /// Not a proxy URL.
    #[error("not a proxy URL")]
    Proxy(#[source] reqwest::Error),
}

pub(crate) fn parse_namespace(s: &str) -> Result<String, FlagError> {
    if runway::api::is_dns_label(s) {
        Ok(s.to_owned())
    } else {
        Err(FlagError::Namespace)
    }
}

/// A duration flag (`1h30m`, or ISO 8601), not negative.
pub(crate) fn parse_duration(s: &str) -> Result<std::time::Duration, FlagError> {
    let d = runway::engine::duration::parse(s)?;
    std::time::Duration::try_from(d).map_err(FlagError::Negative)
}

pub(crate) fn parse_positive_duration(s: &str) -> Result<std::time::Duration, FlagError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(FlagError::Zero);
    }
    Ok(d)
}

pub(crate) fn parse_cidr(s: &str) -> Result<runway::steps::egress::Cidr, FlagError> {
    Ok(s.parse()?)
}

/// A proxy URL that reqwest takes.
pub(crate) fn parse_proxy(s: &str) -> Result<String, FlagError> {
    reqwest::Proxy::all(s).map_err(FlagError::Proxy)?;
    Ok(s.to_owned())
}

impl McpFlags {
    /// The egress policy: loopback is reachable from `runway serve` (a local tool) and not
    /// from `runway operator`, where the operator's own ports are.
    pub(crate) fn egress(&self, allow_loopback: bool) -> runway::steps::egress::Egress {
        runway::steps::egress::Egress {
            allow: self.egress_allow.clone(),
            deny: self.egress_deny.clone(),
            allow_loopback,
            proxy: self.egress_proxy.clone(),
        }
    }

    pub(crate) fn config(&self) -> anyhow::Result<runway::mcp::Config> {
        let mut c = runway::mcp::Config::new();
        c.allowed_hosts = self.allowed_hosts.clone();
        c.allowed_origins = self.allowed_origins.clone();
        c.task_access = self.task_access;
        c.state_ttl = self.request_state_ttl;
        c.list_tool = !self.no_list_tool;
        c.list_tool_off_in = self.no_list_tool_in.iter().cloned().collect();
        c.console = !self.no_console;
        c.hold_limit = self.hold_limit;
        // Empty: the server supplies its durable key (database or Secret).
        c.state_keys.clear();
        if let Some(f) = &self.state_key_file {
            let text = std::fs::read(f)
                .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", f.display()))?;
            c.state_keys = runway::mcp::parse_state_keys(&text)
                .map_err(|e| anyhow::anyhow!("{}: {e}", f.display()))?;
        }
        Ok(c)
    }
}

#[derive(Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// Flags of `runway serve`.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// Directory of Workflow manifests (YAML, as `kubectl apply -f` takes them); reloaded on change.
    #[arg(long)]
    pub(crate) workflows: PathBuf,
    /// SQLite database file; created when missing.
    #[arg(long)]
    pub(crate) db: PathBuf,
    /// Address of the MCP and health endpoint.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub(crate) listen: SocketAddr,
    /// Runs reconciled at once.
    #[arg(long, default_value_t = 32)]
    pub(crate) workers: usize,
    /// Token file: tokens → users, groups and namespace; rules → permissions; secrets.
    #[arg(long, conflicts_with = "no_auth", required_unless_present = "no_auth")]
    pub(crate) auth_file: Option<PathBuf>,
    /// No authentication (loopback --listen only): everyone is `anonymous` in --namespace.
    #[arg(long)]
    pub(crate) no_auth: bool,
    /// Namespace of `POST /mcp` with --no-auth.
    #[arg(long, default_value = "default")]
    pub(crate) namespace: String,
    #[command(flatten)]
    pub(crate) mcp: McpFlags,
    #[command(flatten)]
    pub(crate) archive: ArchiveFlags,
}

/// Where finished Runs are archived before they are deleted, and for how long.
#[derive(clap::Args)]
pub(crate) struct ArchiveFlags {
    /// Archive every finished Run (arguments, steps, answers, result, Events) before it is
    /// deleted: `sqlite:PATH`, a PostgreSQL URL (`postgres://user:password@host/db`), or `off`.
    /// `runway serve` archives into its --db file unless told otherwise; the operator only
    /// when given one.
    #[arg(long, env = "RUNWAY_ARCHIVE", hide_env_values = true)]
    pub(crate) archive: Option<String>,
    /// Archived Runs that finished longer ago than this are deleted (0: whatever their age).
    #[arg(long, default_value = "2160h", value_parser = parse_duration)]
    pub(crate) archive_max_age: std::time::Duration,
    /// Archived Runs of a namespace past this many, the oldest first, are deleted (0: no limit).
    #[arg(long, default_value_t = 0)]
    pub(crate) archive_max_per_namespace: u64,
}

impl ArchiveFlags {
    /// The archive settings, `default` being the address when none (or `off`) is given.
    pub(crate) fn settings(
        self,
        default: Option<String>,
    ) -> runway::store::archive::keeper::Settings {
        let address = match self.archive {
            Some(a) if a == "off" => None,
            Some(a) => Some(a),
            None => default,
        };
        let max_age = (!self.archive_max_age.is_zero())
            .then(|| jiff::SignedDuration::try_from(self.archive_max_age).ok())
            .flatten();
        runway::store::archive::keeper::Settings {
            address,
            retention: runway::store::archive::Retention {
                max_age,
                max_per_namespace: (self.archive_max_per_namespace > 0)
                    .then_some(self.archive_max_per_namespace),
            },
        }
    }
}

/// Flags of `runway operator`.
#[derive(clap::Args)]
pub(crate) struct OperatorArgs {
    /// Address of the MCP endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub(crate) listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub(crate) metrics_listen: SocketAddr,
    /// Run the controller without Leases, for every Run (a single replica only).
    #[arg(long)]
    pub(crate) no_leader_election: bool,
    /// Name of the coordination.k8s.io Lease of the first shard (shard i: NAME-i; each replica
    /// also keeps NAME-member-IDENTITY).
    #[arg(long, default_value = "runway-controller")]
    pub(crate) lease_name: String,
    /// Namespace of the Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub(crate) lease_namespace: String,
    /// This replica's identity in the Leases.
    #[arg(long, env = "POD_NAME")]
    pub(crate) identity: Option<String>,
    /// Shards the Runs are split into, each driven by one replica at a time; the live replicas
    /// share them evenly (1: one leader drives every Run).
    #[arg(long, default_value_t = 1)]
    pub(crate) shards: u32,
    /// How long a Lease holds without renewal: after a replica dies, the others take its
    /// shards over within about this time.
    #[arg(long, default_value = "15s", value_parser = parse_positive_duration)]
    pub(crate) lease_duration: std::time::Duration,
    /// A holder that could not renew its Lease for this long stops driving the shard (less than
    /// --lease-duration).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub(crate) lease_renew_deadline: std::time::Duration,
    /// How often Leases are renewed and looked at (less than --lease-renew-deadline).
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    pub(crate) lease_retry_period: std::time::Duration,
    /// Audience TokenReview checks bearer tokens against (repeatable; none: the API server's).
    #[arg(long = "token-audience")]
    pub(crate) token_audiences: Vec<String>,
    /// Secret in --lease-namespace holding the state keys (key `state-key`) when
    /// --state-key-file is not given; created with a new key when missing.
    #[arg(long, default_value = "runway-state-key")]
    pub(crate) state_key_secret: String,
    /// How long TokenReview and SubjectAccessReview answers are cached, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub(crate) auth_cache_ttl: std::time::Duration,
    /// Runs reconciled at once.
    #[arg(long, default_value_t = 32)]
    pub(crate) workers: usize,
    /// Write no Kubernetes Event for a step's routine progress (StepStarted, StepSucceeded,
    /// StepSkipped, StepStopped, StepsReused): each Run's status.steps holds it; a Run's own
    /// Events and every warning are still written: a one-step Run makes one Event instead of
    /// three, for clusters whose API server is busy.
    #[arg(long)]
    pub(crate) no_step_events: bool,
    #[command(flatten)]
    pub(crate) mcp: McpFlags,
    #[command(flatten)]
    pub(crate) archive: ArchiveFlags,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run the embedded server: Runs in SQLite, Workflows from a manifest directory.
    Serve(ServeArgs),
    /// Run the operator against a cluster (in-cluster config or kubeconfig): Runs and Workflows
    /// as custom resources, MCP on --listen in every replica, the controller in the elected leader.
    Operator(OperatorArgs),
    /// Call a tool on an MCP server and print its result (prompting for any input it asks for).
    Call {
        /// Tool name.
        tool: String,
        /// An argument, `key=value` (the value is JSON when it parses, else a string). Repeatable.
        #[arg(long = "arg", short = 'a')]
        args: Vec<String>,
        /// All arguments as one JSON object (`--arg` values override its keys).
        #[arg(long)]
        json: Option<String>,
        /// Do not ask for a task: hold the call until it finishes (Ctrl-C cancels the run).
        #[arg(long)]
        no_task: bool,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Inspect and steer tasks.
    Tasks {
        #[command(subcommand)]
        command: TasksCommand,
    },
    /// Check that a Runway server is up: `--ready` (the metrics port's `/readyz`) answers, and
    /// the MCP endpoint answers discovery for the token. Exits 0 when both hold; the chart's
    /// `helm test` hook runs it.
    Check {
        /// Readiness URL to GET first, e.g. `http://runway-metrics:9090/readyz`.
        #[arg(long)]
        ready: Option<String>,
        #[command(flatten)]
        target: TargetFlags,
    },
    /// Check a directory of Workflow manifests as `runway serve` loads it and list every
    /// Workflow with its tool and Ready condition; exits 1 when a file or Workflow is broken.
    Workflows {
        /// Directory of Workflow manifests.
        #[arg(long, default_value = "workflows")]
        workflows: PathBuf,
        /// Check as the Kubernetes store would (`job` steps allowed).
        #[arg(long)]
        jobs: bool,
        /// The database of the `runway serve` that serves the directory: which of two
        /// Workflows offering one tool is older is then decided as that server does (without
        /// it: in file order, as a server starting on a new database would).
        #[arg(long)]
        db: Option<PathBuf>,
    },
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD into a directory.
    Crds {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}
