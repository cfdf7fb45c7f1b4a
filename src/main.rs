//! The `runway` command.

#![forbid(unsafe_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

// The request path allocates many short-lived objects; mimalloc serves them much faster than the
// system allocator (measured by `make bench`, see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
use kube::CustomResourceExt;

/// Runway: Workflows as MCP tools, Runs as durable MCP tasks.
#[derive(Parser)]
#[command(name = "runway", version, about)]
struct Cli {
    /// Log format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// Task commands.
#[derive(Subcommand)]
enum TasksCommand {
    /// Print a task as JSON.
    Get {
        /// Task id.
        id: String,
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
}

/// Where the client commands connect.
#[derive(clap::Args)]
struct TargetFlags {
    /// MCP endpoint URL.
    #[arg(long, env = "RUNWAY_URL", default_value = "http://127.0.0.1:8080/mcp")]
    url: String,
    /// File holding the bearer token.
    #[arg(long, env = "RUNWAY_TOKEN_FILE")]
    token_file: Option<PathBuf>,
}

impl TargetFlags {
    fn target(&self) -> Result<runway::client::Target, runway::client::ClientError> {
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

async fn client_command(command: Command) -> ExitCode {
    use runway::client::{self, ClientError, exit};
    let result: Result<u8, ClientError> = async {
        match command {
            Command::Call {
                tool,
                args,
                json,
                no_task,
                target,
            } => {
                let mut prompter = client::Prompter::new()
                    .map_err(|e| ClientError::Usage(format!("cannot listen for Ctrl-C: {e}")))?;
                client::call(
                    &target.target()?,
                    &tool,
                    json.as_deref(),
                    &args,
                    no_task,
                    &mut prompter,
                )
                .await
            }
            Command::Tasks { command } => match command {
                TasksCommand::Get { id, target } => client::get(&target.target()?, &id).await,
                TasksCommand::Watch { id, target } => client::watch(&target.target()?, &id).await,
                TasksCommand::Cancel { id, target } => client::cancel(&target.target()?, &id).await,
                TasksCommand::Answer {
                    id,
                    key,
                    accept,
                    decline,
                    cancel,
                    target,
                } => {
                    let response = match (accept, decline, cancel) {
                        (Some(json), _, _) => {
                            let content: serde_json::Value = serde_json::from_str(&json)
                                .map_err(|e| ClientError::Usage(format!("--accept: {e}")))?;
                            serde_json::json!({"action": "accept", "content": content})
                        }
                        (None, true, _) => serde_json::json!({"action": "decline"}),
                        (None, false, true) => serde_json::json!({"action": "cancel"}),
                        _ => {
                            return Err(ClientError::Usage(
                                "one of --accept, --decline, --cancel is required".into(),
                            ));
                        }
                    };
                    client::answer(&target.target()?, &id, &key, response).await
                }
            },
            _ => unreachable!("only client commands reach here"),
        }
    }
    .await;
    let code = match result {
        Ok(code) => code,
        Err(ClientError::Interrupted) => exit::INTERRUPTED,
        Err(e) => {
            eprintln!("runway: {e}");
            exit::ERROR
        }
    };
    // A prompt's read of standard input runs on a blocking thread that only a new line or the
    // end of input would release; leaving through the runtime's shutdown would wait for it.
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(i32::from(code))
}

/// Flags of the MCP endpoint, shared by `serve` and `operator`.
#[derive(clap::Args)]
struct McpFlags {
    /// Extra Host names the MCP endpoint accepts (loopback is always accepted), e.g. a Service name.
    #[arg(long = "allowed-host")]
    allowed_hosts: Vec<String>,
    /// Origins accepted on requests that carry `Origin` (`http://host:port`, `:*` for any port).
    #[arg(long = "allowed-origin")]
    allowed_origins: Vec<String>,
    /// An address or CIDR range `http` and `tool` steps may reach even where the egress policy
    /// denies it (link-local and cloud metadata, loopback for `operator`). Repeatable.
    #[arg(long = "egress-allow", value_parser = parse_cidr)]
    egress_allow: Vec<runway::steps::egress::Cidr>,
    /// Who may act on a task: its owner (or who may list runs), or anyone the namespace allows.
    #[arg(long, value_enum, default_value_t = runway::mcp::TaskAccess::Owner)]
    task_access: runway::mcp::TaskAccess,
    /// File holding the keys (≥ 32 bytes each, one per line, newest first) that sign
    /// `requestState` and name idempotent Runs; the first signs, the others still verify (key
    /// rotation). The file must exist (it is read, never created). Without the flag: `serve`
    /// keeps a key in its database, `operator` in a Secret.
    #[arg(long)]
    state_key_file: Option<PathBuf>,
    /// How long a `requestState` handed out with an `input_required` answer stays valid: the
    /// time a person has to answer a question asked before the task exists (e.g. 1h, 30m).
    #[arg(long, default_value = "1h", value_parser = parse_positive_duration)]
    request_state_ttl: std::time::Duration,
    /// Do not offer the `runway_list_runs` tool in any namespace.
    #[arg(long)]
    no_list_tool: bool,
    /// Do not offer the `runway_list_runs` tool in this namespace. Repeatable.
    #[arg(long = "no-list-tool-in", value_name = "NAMESPACE", value_parser = parse_namespace)]
    no_list_tool_in: Vec<String>,
    /// Do not serve the web console (`/ui/`).
    #[arg(long)]
    no_console: bool,
    /// How long a blocking call of a 2025-era client (one that opened with `initialize`) that
    /// sent no progress token is held before it is answered with a result naming its Run,
    /// which goes on (most clients give up after 60 s).
    #[arg(long, default_value = "50s", value_parser = parse_positive_duration)]
    hold_limit: std::time::Duration,
}

fn parse_namespace(s: &str) -> Result<String, String> {
    if runway::api::is_dns_label(s) {
        Ok(s.to_owned())
    } else {
        Err("not a namespace name (a DNS label)".into())
    }
}

/// A duration flag (`1h30m`, or ISO 8601), not negative.
fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = runway::engine::duration::parse(s)?;
    std::time::Duration::try_from(d).map_err(|_| "must not be negative".to_owned())
}

fn parse_positive_duration(s: &str) -> Result<std::time::Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("must be longer than zero".into());
    }
    Ok(d)
}

fn parse_cidr(s: &str) -> Result<runway::steps::egress::Cidr, String> {
    s.parse()
}

impl McpFlags {
    /// The egress policy: loopback is reachable from `runway serve` (a local tool) and not
    /// from `runway operator`, where the operator's own ports are.
    fn egress(&self, allow_loopback: bool) -> runway::steps::egress::Egress {
        runway::steps::egress::Egress {
            allow: self.egress_allow.clone(),
            allow_loopback,
        }
    }

    fn config(&self) -> anyhow::Result<runway::mcp::Config> {
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
enum LogFormat {
    Text,
    Json,
}

/// Flags of `runway serve`.
#[derive(clap::Args)]
struct ServeArgs {
    /// Directory of Workflow manifests (YAML, as `kubectl apply -f` takes them); reloaded on change.
    #[arg(long)]
    workflows: PathBuf,
    /// SQLite database file; created when missing.
    #[arg(long)]
    db: PathBuf,
    /// Address of the MCP and health endpoint.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Runs reconciled at once.
    #[arg(long, default_value_t = 32)]
    workers: usize,
    /// Token file: tokens → users, groups and namespace; rules → permissions; secrets.
    #[arg(long, conflicts_with = "no_auth", required_unless_present = "no_auth")]
    auth_file: Option<PathBuf>,
    /// No authentication (loopback --listen only): everyone is `anonymous` in --namespace.
    #[arg(long)]
    no_auth: bool,
    /// Namespace of `POST /mcp` with --no-auth.
    #[arg(long, default_value = "default")]
    namespace: String,
    #[command(flatten)]
    mcp: McpFlags,
}

/// Flags of `runway operator`.
#[derive(clap::Args)]
struct OperatorArgs {
    /// Address of the MCP endpoint.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Address of /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9090")]
    metrics_listen: SocketAddr,
    /// Run the controller without Leases, for every Run (a single replica only).
    #[arg(long)]
    no_leader_election: bool,
    /// Name of the coordination.k8s.io Lease of the first shard (shard i: NAME-i; each replica
    /// also keeps NAME-member-IDENTITY).
    #[arg(long, default_value = "runway-controller")]
    lease_name: String,
    /// Namespace of the Leases.
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    lease_namespace: String,
    /// This replica's identity in the Leases.
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// Shards the Runs are split into, each driven by one replica at a time; the live replicas
    /// share them evenly (1: one leader drives every Run).
    #[arg(long, default_value_t = 1)]
    shards: u32,
    /// How long a Lease holds without renewal: after a replica dies, the others take its
    /// shards over within about this time.
    #[arg(long, default_value = "15s", value_parser = parse_positive_duration)]
    lease_duration: std::time::Duration,
    /// A holder that could not renew its Lease for this long stops driving the shard (less than
    /// --lease-duration).
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    lease_renew_deadline: std::time::Duration,
    /// How often Leases are renewed and looked at (less than --lease-renew-deadline).
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration)]
    lease_retry_period: std::time::Duration,
    /// Audience TokenReview checks bearer tokens against (repeatable; none: the API server's).
    #[arg(long = "token-audience")]
    token_audiences: Vec<String>,
    /// Secret in --lease-namespace holding the state keys (key `state-key`) when
    /// --state-key-file is not given; created with a new key when missing.
    #[arg(long, default_value = "runway-state-key")]
    state_key_secret: String,
    /// How long TokenReview and SubjectAccessReview answers are cached, e.g. 10s.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    auth_cache_ttl: std::time::Duration,
    /// Runs reconciled at once.
    #[arg(long, default_value_t = 32)]
    workers: usize,
    #[command(flatten)]
    mcp: McpFlags,
}

#[derive(Subcommand)]
enum Command {
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
    /// Check a directory of Workflow manifests as `runway serve` loads it and list every
    /// Workflow with its tool and Ready condition; exits 1 when a file or Workflow is broken.
    Workflows {
        /// Directory of Workflow manifests.
        #[arg(long, default_value = "workflows")]
        workflows: PathBuf,
        /// Check as the Kubernetes store would (`job` steps allowed).
        #[arg(long)]
        jobs: bool,
    },
    /// Print the CustomResourceDefinitions as YAML, or write one file per CRD into a directory.
    Crds {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

/// `runway workflows`: the manifest directory as the embedded server sees it.
fn list_workflows(dir: &std::path::Path, jobs: bool) -> ExitCode {
    use runway::store::manifests::ManifestWorkflows;
    if !dir.is_dir() {
        eprintln!("runway: {} is not a directory", dir.display());
        return ExitCode::from(2);
    }
    let src = ManifestWorkflows::load(dir, runway::engine::validate::Capabilities { jobs });
    let rows = src.snapshot();
    let mut broken = !src.problems().is_empty();
    println!(
        "{:<16} {:<24} {:<24} {:<6} {:<16} MESSAGE",
        "NAMESPACE", "NAME", "TOOL", "READY", "REASON"
    );
    for wf in &rows {
        let c = wf.status.as_ref().and_then(|s| s.conditions.first());
        broken |= !wf.is_ready();
        println!(
            "{:<16} {:<24} {:<24} {:<6} {:<16} {}",
            wf.metadata.namespace.as_deref().unwrap_or_default(),
            wf.metadata.name.as_deref().unwrap_or_default(),
            wf.tool_name(),
            c.map_or("Unknown", |c| c.status.as_str()),
            c.map_or("", |c| c.reason.as_str()),
            if wf.is_ready() {
                ""
            } else {
                c.map_or("", |c| c.message.as_str())
            },
        );
    }
    for p in src.problems() {
        eprintln!("{}: {}", p.file.display(), p.message);
    }
    if broken {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

fn init_logs(format: LogFormat, default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let all = [
        (
            "workflows.runway.dev.yaml",
            serde_saphyr::to_string(&runway::api::Workflow::crd())?,
        ),
        (
            "runs.runway.dev.yaml",
            serde_saphyr::to_string(&runway::api::Run::crd())?,
        ),
    ];
    match dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir)?;
            for (file, yaml) in all {
                let header = "# Generated by `runway crds` (make crds). Do not edit.\n---\n";
                std::fs::write(dir.join(file), format!("{header}{yaml}"))?;
            }
        }
        None => {
            for (_, yaml) in all {
                print!("---\n{yaml}");
            }
        }
    }
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler installs");
    tokio::select! {
        _ = ctrl_c => {}
        _ = term.recv() => {}
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    runway::install_crypto_provider();
    let cli = Cli::parse();
    // Client commands talk to people: only warnings unless RUST_LOG says otherwise.
    let quiet = matches!(cli.command, Command::Call { .. } | Command::Tasks { .. });
    // rmcp logs every stateless request at info; its warnings are what operators need.
    // `runway workflows` prints its findings as a table; the loader's log would repeat them.
    let default_logs = match cli.command {
        Command::Workflows { .. } => "error",
        // The client explains failures itself; rmcp's own error lines name library internals.
        _ if quiet => "warn,rmcp=off",
        _ => "info,rmcp=warn",
    };
    init_logs(cli.log_format, default_logs);
    match cli.command {
        c @ (Command::Call { .. } | Command::Tasks { .. }) => client_command(c).await,
        Command::Workflows { workflows, jobs } => list_workflows(&workflows, jobs),
        Command::Crds { dir } => match crds(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("runway: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Operator(args) => operator(args).await,
        Command::Serve(args) => serve(args).await,
    }
}

/// `runway operator`.
async fn operator(args: OperatorArgs) -> ExitCode {
    let OperatorArgs {
        listen,
        metrics_listen,
        no_leader_election,
        lease_name,
        lease_namespace,
        identity,
        shards,
        lease_duration,
        lease_renew_deadline,
        lease_retry_period,
        token_audiences,
        state_key_secret,
        auth_cache_ttl,
        workers,
        mcp,
    } = args;
    let operator_egress = mcp.egress(false);
    let mcp = match mcp.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runway: {e}");
            return ExitCode::from(2);
        }
    };
    let identity = identity.unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| format!("runway-{}", std::process::id()))
    });
    let mut lease =
        runway::operator::lease::Settings::new(&lease_name, &lease_namespace, &identity);
    lease.shards = shards;
    (lease.duration, lease.renew_deadline, lease.retry_period) =
        (lease_duration, lease_renew_deadline, lease_retry_period);
    if let Err(e) = lease.check() {
        eprintln!("runway: {e}");
        return ExitCode::from(2);
    }
    let opts = runway::operator::Options {
        listen,
        metrics_listen,
        leader_election: !no_leader_election,
        lease,
        audiences: token_audiences,
        auth_cache_ttl,
        workers,
        egress: operator_egress,
        mcp,
        state_key_secret,
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        token.cancel();
    });
    match runway::operator::run(opts, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("runway: {e}");
            ExitCode::from(2)
        }
    }
}

/// `runway serve`.
async fn serve(args: ServeArgs) -> ExitCode {
    let ServeArgs {
        workflows,
        db,
        listen,
        workers,
        auth_file,
        no_auth: _,
        namespace,
        mcp,
    } = args;
    let egress = mcp.egress(true);
    let mcp = match mcp.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runway: {e}");
            return ExitCode::from(2);
        }
    };
    let auth = match auth_file {
        Some(f) => runway::server::AuthMode::File(f),
        None => runway::server::AuthMode::None { namespace },
    };
    let opts = runway::server::Options {
        workflows,
        db,
        listen,
        workers,
        auth,
        mcp,
        egress,
    };
    match runway::server::Server::start(opts).await {
        Ok(server) => {
            server.wait(shutdown_signal()).await;
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("runway: {e}");
            ExitCode::from(2)
        }
    }
}
