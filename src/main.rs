//! The `runway` command.

#![forbid(unsafe_code)]

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod cli;
use cli::{Cli, Command, LogFormat, OperatorArgs, ServeArgs, TasksCommand};

// The request path allocates many short-lived objects; mimalloc serves them much faster than the
// system allocator (measured by `make bench`, see docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
            Command::Check { ready, target } => {
                client::check(&target.target()?, ready.as_deref()).await
            }
            Command::Tasks { command } => tasks_command(command).await,
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

/// `runway tasks …`.
async fn tasks_command(command: TasksCommand) -> Result<u8, runway::client::ClientError> {
    use runway::client::{self, ClientError};
    match command {
        TasksCommand::Get {
            id,
            archived: true,
            target,
        } => client::get_archived(&target.target()?, &id).await,
        TasksCommand::Get { id, target, .. } => client::get(&target.target()?, &id).await,
        TasksCommand::Watch { id, target } => client::watch(&target.target()?, &id).await,
        TasksCommand::Cancel { id, target } => client::cancel(&target.target()?, &id).await,
        TasksCommand::Pause { id, reason, target } => {
            client::pause(&target.target()?, &id, true, reason.as_deref()).await
        }
        TasksCommand::Resume { id, target } => {
            client::pause(&target.target()?, &id, false, None).await
        }
        TasksCommand::Retry { id, args, target } => {
            let changed = client::arguments(None, &args, None)?;
            client::retry(&target.target()?, &id, changed).await
        }
        TasksCommand::List { filters, target } => client::list(&target.target()?, &filters).await,
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
    }
}

/// `runway workflows`: the manifest directory as the embedded server sees it.
fn list_workflows(dir: &std::path::Path, jobs: bool, db: Option<&std::path::Path>) -> ExitCode {
    use runway::store::manifests::ManifestWorkflows;
    if !dir.is_dir() {
        eprintln!("runway: {} is not a directory", dir.display());
        return ExitCode::from(2);
    }
    let book = match db.map(runway::store::identities::WorkflowBook::open_read_only) {
        Some(Ok(b)) => Some(b),
        Some(Err(e)) => {
            eprintln!("runway: {e}");
            return ExitCode::from(2);
        }
        None => None,
    };
    let caps = runway::engine::validate::Capabilities { jobs };
    let src = ManifestWorkflows::load_with(dir, caps, book);
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

/// The replica's name in the Leases and in its traces: `--identity` (the Pod name), else the
/// host name.
fn host_identity() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| format!("runway-{}", std::process::id()))
}

/// Logs on stderr (text or JSON, filtered by `RUST_LOG` or `default`) and, for a server
/// (`traced_as` names it), spans exported over OTLP when the `OTEL_*` environment asks for
/// them: Runway's own spans at info, without the reconciles, which the Run's spans cover.
fn init_logs(
    format: LogFormat,
    default: &str,
    traced_as: Option<&str>,
) -> Result<(), runway::telemetry::TracesError> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default))
        // kube-client logs a response it cannot decode whole, at WARN: a page of up to 500
        // Runs of every tenant. Runway logs the error itself, without the objects.
        .add_directive(
            "kube_client::client=error"
                .parse()
                .expect("a valid log directive"),
        );
    let tracer = match traced_as {
        Some(instance) => runway::telemetry::init(instance)?,
        None => None,
    };
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let Some(tracer) = tracer else {
        // Without traces, one global filter: its level bounds every `debug!` of every crate
        // before any callsite is looked at, which per-layer filters cannot do.
        let logs = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(ansi)
            .with_writer(std::io::stderr);
        match format {
            LogFormat::Text => logs.init(),
            LogFormat::Json => logs.json().init(),
        }
        return Ok(());
    };
    let exported = tracing_subscriber::filter::filter_fn(|m| {
        m.target().starts_with("runway")
            && *m.level() <= tracing::Level::INFO
            && (m.is_event() || m.name() != "reconcile")
    });
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_context_activation(false)
        .with_tracked_inactivity(false)
        .with_filter(exported);
    let logs = tracing_subscriber::fmt::layer()
        .with_ansi(ansi)
        .with_writer(std::io::stderr);
    // The request span is raised to info only for the traces; formatting its fields for the
    // log of every request would cost the hot path as much as exporting it.
    use tracing_subscriber::filter::FilterExt;
    let logged = filter.and(tracing_subscriber::filter::filter_fn(|m| {
        !(m.is_span() && m.name() == "request" && *m.level() == tracing::Level::INFO)
    }));
    let registry = tracing_subscriber::registry().with(otel);
    match format {
        LogFormat::Text => registry.with(logs.with_filter(logged)).init(),
        LogFormat::Json => registry.with(logs.json().with_filter(logged)).init(),
    }
    Ok(())
}

fn crds(dir: Option<PathBuf>) -> anyhow::Result<()> {
    let all = runway::api::schema::crds()
        .into_iter()
        .map(|(file, crd)| Ok((file, serde_saphyr::to_string(&crd)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
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
    let quiet = matches!(
        cli.command,
        Command::Call { .. } | Command::Tasks { .. } | Command::Check { .. }
    );
    // rmcp logs every stateless request at info; its warnings are what operators need.
    // `runway workflows` prints its findings as a table; the loader's log would repeat them.
    let default_logs = match cli.command {
        Command::Workflows { .. } => "error",
        // The client explains failures itself; rmcp's own error lines name library internals.
        _ if quiet => "warn,rmcp=off",
        _ => "info,rmcp=warn",
    };
    let traced_as = match &cli.command {
        Command::Operator(args) => Some(args.identity.clone().unwrap_or_else(host_identity)),
        Command::Serve(_) => Some(host_identity()),
        _ => None,
    };
    if let Err(e) = init_logs(cli.log_format, default_logs, traced_as.as_deref()) {
        eprintln!("runway: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        c @ (Command::Call { .. } | Command::Tasks { .. } | Command::Check { .. }) => {
            client_command(c).await
        }
        Command::Workflows {
            workflows,
            jobs,
            db,
        } => list_workflows(&workflows, jobs, db.as_deref()),
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
        no_step_events,
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
        archive,
    } = args;
    let operator_egress = mcp.egress(false);
    let mcp = match mcp.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("runway: {e}");
            return ExitCode::from(2);
        }
    };
    let identity = identity.unwrap_or_else(host_identity);
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
        archive: archive.settings(None),
        step_events: !no_step_events,
    };
    let shutdown = tokio_util::sync::CancellationToken::new();
    let token = shutdown.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        token.cancel();
    });
    let ran = runway::operator::run(opts, shutdown).await;
    runway::telemetry::shutdown();
    match ran {
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
        archive,
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
    let archive = archive.settings(Some(format!("sqlite:{}", db.display())));
    let opts = runway::server::Options {
        archive,
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
            runway::telemetry::shutdown();
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("runway: {e}");
            ExitCode::from(2)
        }
    }
}
