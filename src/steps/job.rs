//! `job` steps (Kubernetes store only): one `batch/v1` Job per attempt, named
//! deterministically and owned by the Run, so a restarted controller finds it instead of
//! creating a second one. Output is the first container's termination message.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client, Resource};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::Executor;
use crate::api::{ErrorClass, JobStep, Run};
use crate::engine::marks::{Marks, Sealed};
use crate::engine::{Action, Effect, Outcome};

/// Label naming the Run that owns a Job.
pub(crate) const RUN_LABEL: &str = "runway.dev/run";
/// Label naming the step a Job runs.
pub(crate) const STEP_LABEL: &str = "runway.dev/step";

/// A step's record name as a label value: an item `deploy[2]` is `deploy.2` (brackets are not
/// allowed in label values, and no step name has a dot).
fn step_label(record: &str) -> String {
    record.replace('[', ".").replace(']', "")
}
/// Label the Job controller puts on its pods.
const JOB_NAME_LABEL: &str = "batch.kubernetes.io/job-name";

/// Runs `job` steps and deletes Jobs on cleanup.
pub struct JobExecutor {
    client: Client,
    marks: Marks,
}

impl JobExecutor {
    /// Jobs through `client`, sealed and recognised with `marks`.
    pub fn new(client: Client, marks: Marks) -> Self {
        Self { client, marks }
    }
}

/// The parts a Job's seal covers: its identity, the Run that owns it and the step it runs.
fn job_parts<'a>(ns: &'a str, job: &'a str, run_uid: &'a str, step: &'a str) -> [&'a str; 4] {
    [ns, job, run_uid, step]
}

/// Whether `job` is the Job Runway created for step `step` of the Run with `run_uid`: it names
/// the Run as its controller (what Kubernetes garbage collection follows) and carries Runway's
/// seal (which nobody else can write; an ownerReference, anyone who creates the Job can).
fn ours(marks: &Marks, job: &Job, run_uid: &str, step: &str) -> bool {
    let ns = job.metadata.namespace.as_deref().unwrap_or_default();
    let name = job.metadata.name.as_deref().unwrap_or_default();
    let mark = job
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(crate::api::annotations::MARK))
        .map(String::as_str);
    controlled_by(job.metadata.owner_references.as_ref(), run_uid)
        && marks.verify(Sealed::Job, &job_parts(ns, name, run_uid, step), mark)
}

/// Whether `job` is one Runway made for step `step` of an earlier Run of `run`'s name (another
/// uid): that Run was deleted and this one made under its name, and its Job, owned by it, goes
/// with it a moment later.
fn left_by_earlier(marks: &Marks, job: &Job, run: &Run, step: &str) -> bool {
    let owners = job.metadata.owner_references.iter().flatten();
    let mut earlier = owners.filter(|o| o.controller == Some(true) && o.kind == "Run");
    earlier.any(|o| {
        Some(&o.name) == run.metadata.name.as_ref()
            && Some(&o.uid) != run.metadata.uid.as_ref()
            && ours(marks, job, &o.uid, step)
    })
}

/// Once Job `name` of uid `uid` is gone, for at most [`super::EARLIER_GONE_WAIT`].
async fn until_gone(api: &Api<Job>, name: &str, uid: &str) -> Result<(), Outcome> {
    let what = format!("waiting for job {name} of an earlier run of this name to go");
    let gone = again(&what, || async {
        Ok(await_condition(api.clone(), name, conditions::is_deleted(uid)).await?)
    });
    match tokio::time::timeout(super::EARLIER_GONE_WAIT, gone).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(message)) => Err(Outcome::Failed {
            detail: None,
            class: ErrorClass::ClientError,
            message,
        }),
        Err(_) => Err(Outcome::Failed {
            detail: None,
            class: ErrorClass::Timeout,
            message: format!("job {name} of an earlier run of this name is still there"),
        }),
    }
}

/// Why a `job` step's template makes no Job.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JobTemplateError {
    /// The template is not an object with a `spec` object.
    #[error("job.template needs a pod spec")]
    NoPodSpec,
    /// The Job built from it is not a valid `batch/v1` Job.
    #[error("job.template: {0}")]
    Invalid(#[source] serde_json::Error),
}

/// The Job for one attempt of a step.
pub(crate) fn build_job(
    run: &Run,
    step_name: &str,
    job_name: &str,
    step: &JobStep,
    env: &[(String, String)],
    active_deadline: Option<i64>,
) -> Result<Job, JobTemplateError> {
    let mut template = step.template.clone();
    if !template.is_object() || !template.get("spec").is_some_and(Value::is_object) {
        return Err(JobTemplateError::NoPodSpec);
    }
    if !env.is_empty()
        && let Some(containers) = template["spec"]
            .get_mut("containers")
            .and_then(Value::as_array_mut)
    {
        for c in containers.iter_mut().filter(|c| c.is_object()) {
            if !c.get("env").is_some_and(Value::is_array) {
                c["env"] = json!([]);
            }
            if let Some(list) = c["env"].as_array_mut() {
                for (name, value) in env {
                    list.push(json!({"name": name, "value": value}));
                }
            }
        }
    }
    if template["spec"].get("restartPolicy").is_none() {
        template["spec"]["restartPolicy"] = json!("Never");
    }
    let run_name = run.metadata.name.clone().unwrap_or_default();
    let owner = json!({
        "apiVersion": Run::api_version(&()),
        "kind": Run::kind(&()),
        "name": run_name,
        "uid": run.metadata.uid.clone().unwrap_or_default(),
        "controller": true,
        "blockOwnerDeletion": true,
    });
    let mut spec = json!({
        "backoffLimit": step.backoff_limit.unwrap_or(0),
        "template": template,
    });
    if let Some(secs) = active_deadline {
        spec["activeDeadlineSeconds"] = json!(secs.max(1));
    }
    serde_json::from_value(json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name,
            "namespace": run.metadata.namespace,
            "labels": {RUN_LABEL: run_name, STEP_LABEL: step_label(step_name)},
            "ownerReferences": [owner],
        },
        "spec": spec,
    }))
    .map_err(JobTemplateError::Invalid)
}

fn finished(job: &Job) -> Option<bool> {
    let conditions = job.status.as_ref()?.conditions.as_ref()?;
    conditions
        .iter()
        .find_map(|c| match (c.type_.as_str(), c.status.as_str()) {
            ("Complete", "True") => Some(true),
            ("Failed", "True") => Some(false),
            _ => None,
        })
}

/// The attempt's Job exists and is this Run's: created when missing (a Job of that name that
/// another object controls is never adopted). `Some` with the attempt's outcome when not.
#[allow(clippy::too_many_arguments)]
async fn ensure_job(
    marks: &Marks,
    api: &Api<Job>,
    run: &Run,
    effect: &Effect,
    step: &JobStep,
    job_name: &str,
    env: &[(String, String)],
    left: Option<Duration>,
) -> Option<Outcome> {
    let mut existing = match api.get_opt(job_name).await {
        Ok(j) => j,
        Err(e) => {
            return Some(connection(e));
        }
    };
    if let Some(j) = existing.take_if(|j| left_by_earlier(marks, j, run, &effect.step)) {
        let uid = j.metadata.uid.unwrap_or_default();
        if let Err(failed) = until_gone(api, job_name, &uid).await {
            return Some(failed);
        }
    }
    if existing.is_none() {
        let mut job = match build_job(
            run,
            &effect.step,
            job_name,
            step,
            env,
            left.map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX)),
        ) {
            Ok(j) => j,
            Err(e) => return Some(Outcome::internal(e.to_string())),
        };
        let ns = run.metadata.namespace.as_deref().unwrap_or_default();
        let uid = run.metadata.uid.as_deref().unwrap_or_default();
        let mark = marks.seal(Sealed::Job, &job_parts(ns, job_name, uid, &effect.step));
        job.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(crate::api::annotations::MARK.to_owned(), mark);
        match api.create(&PostParams::default(), &job).await {
            Ok(_) => {}
            // Created by an earlier controller between our read and our create: follow it.
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(kube::Error::Api(s)) if s.code == 422 || s.code == 400 => {
                return Some(Outcome::internal(format!("job rejected: {}", s.message)));
            }
            Err(e) => {
                return Some(connection(e));
            }
        }
    }
    let run_uid = run.metadata.uid.clone().unwrap_or_default();
    match api.get_opt(job_name).await {
        Ok(Some(j)) if ours(marks, &j, &run_uid, &effect.step) => {}
        Ok(Some(_)) => {
            return Some(Outcome::internal(format!(
                "job {job_name} exists and was not created by Runway for this run; not adopting it"
            )));
        }
        Ok(None) => {}
        Err(e) => {
            return Some(connection(e));
        }
    }
    None
}

/// A failed request to the API server: retried like any connection failure.
fn connection(e: kube::Error) -> Outcome {
    Outcome::Failed {
        detail: None,
        class: ErrorClass::Connection,
        message: e.to_string(),
    }
}

/// Whether `owners` name `uid` as their controller: the only proof that an object with the
/// expected name is ours (anyone who may create Jobs or Pods in the namespace could have made
/// one with that name first).
fn controlled_by(
    owners: Option<&Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>,
    uid: &str,
) -> bool {
    !uid.is_empty()
        && owners.is_some_and(|o| o.iter().any(|r| r.uid == uid && r.controller == Some(true)))
}

impl JobExecutor {
    /// The output of the succeeded `job`: the termination message of the first container of
    /// its pod that succeeded (not one of a failed attempt's pods, not a sidecar's). Only pods
    /// the Job controls are read; a failed list is tried again.
    async fn output(&self, ns: &str, job: &Job) -> Result<Value, String> {
        let name = job.metadata.name.as_deref().unwrap_or_default();
        let uid = job.metadata.uid.as_deref().unwrap_or_default();
        let first = job
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .and_then(|s| s.containers.first())
            .map(|c| c.name.clone())
            .unwrap_or_default();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let params = ListParams::default().labels(&format!("{JOB_NAME_LABEL}={name}"));
        let list = again(&format!("reading the pods of job {name}"), || async {
            Ok(pods.list(&params).await?)
        })
        .await?;
        let message = list.items.into_iter().find_map(|p| {
            if !controlled_by(p.metadata.owner_references.as_ref(), uid) {
                return None;
            }
            let status = p.status?;
            if status.phase.as_deref() != Some("Succeeded") {
                return None;
            }
            status
                .container_statuses?
                .into_iter()
                .find(|c| c.name == first)?
                .state?
                .terminated?
                .message
        });
        Ok(match message {
            Some(m) => serde_json::from_str(&m).unwrap_or(Value::String(m)),
            None => Value::Null,
        })
    }

    async fn run_job(
        &self,
        run: &Run,
        effect: &Effect,
        step: &JobStep,
        job_name: &str,
        env: &[(String, String)],
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        // Stopped before it began (a cancel that came with the Run it was read from): no Job.
        if cancel.is_cancelled() {
            return None;
        }
        let ns = run.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
        let left = super::time_left(effect);
        if let Some(failed) =
            ensure_job(&self.marks, &api, run, effect, step, job_name, env, left).await
        {
            return Some(failed);
        }
        // Stopped while the Job was being made: the step's cleanup may have found no Job to
        // delete, so the Job is reported, and the engine has it deleted (a stopped step's
        // started work is cleaned up as its own would have been).
        if cancel.is_cancelled() {
            return Some(Outcome::Checkpoint {
                upstream_task_id: None,
                job_name: Some(job_name.to_owned()),
            });
        }
        let ended = async {
            let job = until_finished(&api, job_name).await?;
            let output = match job.as_ref() {
                Some(j) if finished(j) == Some(true) => Some(self.output(&ns, j).await?),
                _ => None,
            };
            Ok::<_, String>((job, output))
        };
        let timeout = left.unwrap_or(Duration::MAX);
        let done = tokio::select! {
            _ = cancel.cancelled() => return None,
            r = tokio::time::timeout(timeout, ended) => r,
        };
        let (job, output) = match done {
            Ok(Ok(ended)) => ended,
            // A refusal that will not pass (the operator's rights, say): the step says why,
            // and the engine has the Job deleted, since nothing follows it any more.
            Ok(Err(refused)) => {
                return Some(Outcome::Failed {
                    detail: None,
                    class: ErrorClass::ClientError,
                    message: refused,
                });
            }
            // Out of time, perhaps before this attempt looked at all (it resumed after its
            // deadline, the Job having finished meanwhile): a Job that ended has its own
            // verdict, and a success is not run again as a timeout.
            Err(_) => match self.ended_by_now(&api, &ns, job_name).await {
                Some(ended) => ended,
                None => return Some(timed_out(job_name)),
            },
        };
        if let Some(output) = output {
            return Some(Outcome::Succeeded(output));
        }
        let why = match job {
            None => "deleted before it finished".to_owned(),
            Some(j) => j
                .status
                .and_then(|s| s.conditions)
                .and_then(|c| c.into_iter().find(|c| c.type_ == "Failed"))
                .and_then(|c| c.message)
                .unwrap_or_else(|| "failed".into()),
        };
        Some(Outcome::Failed {
            detail: None,
            class: ErrorClass::ServerError,
            message: format!("job {job_name}: {why}"),
        })
    }
}

/// A failed call about a Job or its pods: what went wrong, and whether it may pass.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
struct ReadError {
    message: String,
    transient: bool,
}

/// Whether an API status may pass: the API server restarting or overloaded (5xx, 429), a
/// watch expired (410). A refusal (403: the operator's rights; 404; 400) will not.
fn passing(code: u16) -> bool {
    code >= 500 || code == 410 || code == 429
}

/// Whether a client error may pass: an API status that may, or the connection (refused,
/// reset, timed out).
fn client_passing(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(s) => passing(s.code),
        _ => true,
    }
}

impl From<kube::Error> for ReadError {
    fn from(e: kube::Error) -> Self {
        Self {
            transient: client_passing(&e),
            message: e.to_string(),
        }
    }
}

impl From<kube::runtime::wait::Error> for ReadError {
    fn from(e: kube::runtime::wait::Error) -> Self {
        use kube::runtime::watcher::Error as W;
        let kube::runtime::wait::Error::ProbeFailed(w) = &e;
        let transient = match w {
            W::InitialListFailed(k) | W::WatchStartFailed(k) | W::WatchFailed(k) => {
                client_passing(k)
            }
            W::WatchError(s) => passing(s.code),
            W::NoResourceVersion => false,
        };
        Self {
            message: e.to_string(),
            transient,
        }
    }
}

/// `read` (`what` says what it does) until it succeeds or fails for a reason that will not
/// pass ([`super::again`]); that reason. The reads of a Job already running are retried rather
/// than failed: failing the step would delete a Job that runs on fine (an API server
/// restarting, a watch expired with 410), and its retry would start the work again. The
/// step's timeout and the Run's deadline bound the wait.
async fn again<T, F, Fut>(what: &str, read: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ReadError>>,
{
    super::again(what, |e: &ReadError| e.transient, read)
        .await
        .map_err(|e| format!("{what}: {}", e.message))
}

/// Delete Job `name` and, in the background, its pods, if `run` is its controller (a Run named
/// to match could point a cleanup at someone else's Job; one made before Jobs were sealed is
/// still this Run's); gone counts as deleted, and the delete names the uid checked. A refusal
/// that may pass is tried again (the cleanup's deadline bounds it): a Job left behind runs on
/// until its Run is deleted.
async fn delete_job(api: &Api<Job>, run: &Run, name: &str) -> Result<Value, String> {
    let run_uid = run.metadata.uid.as_deref().unwrap_or_default();
    let found = again(&format!("reading job {name}"), || async {
        Ok(api.get_opt(name).await?)
    })
    .await?;
    let Some(job) = found else {
        return Ok(json!({"deleted": name}));
    };
    if !controlled_by(job.metadata.owner_references.as_ref(), run_uid) {
        return Ok(json!({"left": name, "reason": "not this run's job"}));
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: job.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    again(&format!("deleting job {name}"), || async {
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            // Gone, or another Job of the name (the precondition's uid no longer matches).
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
            Err(e) => Err(ReadError::from(e)),
        }
    })
    .await?;
    Ok(json!({"deleted": name}))
}

/// The outcome of an attempt whose Job was still running when its time was up.
fn timed_out(job_name: &str) -> Outcome {
    Outcome::Failed {
        detail: None,
        class: ErrorClass::Timeout,
        message: format!("job {job_name} timed out"),
    }
}

/// How long one last look at a Job whose attempt ran out of time may take.
const LAST_LOOK: Duration = Duration::from_secs(10);

impl JobExecutor {
    /// Job `name` and its output if it has ended by now (one read, at most [`LAST_LOOK`]);
    /// `None` when it has not, or cannot be read.
    async fn ended_by_now(
        &self,
        api: &Api<Job>,
        ns: &str,
        name: &str,
    ) -> Option<(Option<Job>, Option<Value>)> {
        tokio::time::timeout(LAST_LOOK, async {
            let job = api.get_opt(name).await.ok()??;
            let output = match finished(&job)? {
                true => Some(self.output(ns, &job).await.ok()?),
                false => None,
            };
            Some((Some(job), output))
        })
        .await
        .ok()
        .flatten()
    }
}

/// Job `name` once it has finished, or `None` once it is gone (deleted by someone else: it
/// will never finish).
async fn until_finished(api: &Api<Job>, name: &str) -> Result<Option<Job>, String> {
    let what = format!("reading job {name}");
    again(&what, || async {
        let done = |j: Option<&Job>| j.is_none_or(|j| finished(j).is_some());
        Ok(await_condition(api.clone(), name, done).await?)
    })
    .await
}

#[async_trait]
impl Executor for JobExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        match &effect.action {
            Action::Job {
                step,
                job_name,
                env,
            } => self.run_job(run, effect, step, job_name, env, cancel).await,
            Action::Cleanup(c) => {
                let Some(name) = &c.delete_job else {
                    return Some(Outcome::Succeeded(Value::Null));
                };
                let ns = run.metadata.namespace.clone().unwrap_or_default();
                let api: Api<Job> = Api::namespaced(self.client.clone(), &ns);
                let deleting = async {
                    match delete_job(&api, run, name).await {
                        Ok(done) => Outcome::Succeeded(done),
                        Err(message) => Outcome::Failed {
                            detail: None,
                            class: ErrorClass::ClientError,
                            message,
                        },
                    }
                };
                let timed_out = || Outcome::Failed {
                    detail: None,
                    class: ErrorClass::Timeout,
                    message: format!("deleting job {name}: not done in the time a cleanup has"),
                };
                // A cleanup runs on a worker of its Run's namespace: one whose Run is deleted
                // meanwhile lets it go (the Job goes with the Run it belongs to).
                tokio::select! {
                    out = super::within_deadline(effect, deleting, timed_out) => Some(out),
                    _ = cancel.cancelled() => None,
                }
            }
            _ => Some(Outcome::internal("not a job action")),
        }
    }
}
