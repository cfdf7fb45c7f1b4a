//! Schedules: reading a cron expression in a time zone, which time is due, what the concurrency
//! policy says, which old Runs the history limits let go, and the name of a scheduled Run. The
//! scheduler (`controller::schedules`) acts on these answers; the state they start from is the
//! Runs a schedule already started, so a restart or a failover loses nothing.

use std::str::FromStr;

use jiff::Timestamp;
use jiff::tz::TimeZone;

use super::duration;
use super::marks::{Marks, Sealed};
use crate::api::{ConcurrencyPolicy, Run, ScheduleSpec, Workflow, annotations};

/// Succeeded Runs of a schedule kept when the schedule does not say.
pub const DEFAULT_SUCCEEDED_KEPT: u32 = 3;
/// Failed or cancelled Runs of a schedule kept when the schedule does not say.
pub const DEFAULT_FAILED_KEPT: u32 = 1;
/// Missed times counted at most (Runway down for long under a fast schedule).
const MAX_MISSED: usize = 10_000;

/// A schedule's times, in its time zone: those of one cron expression, or, when both the day
/// of the month and the day of the week are restricted, the union of two (one for each day
/// field), since a CronJob runs when either matches while the cron library wants both.
#[derive(Debug, Clone)]
pub struct Timetable {
    crons: Vec<jiff_cron::Schedule>,
    tz: TimeZone,
}

/// Whether a day field lets every day through (`*`, `*/n`, `?`): a CronJob then reads the
/// other day field alone, and both together otherwise.
fn unrestricted(field: &str) -> bool {
    field.starts_with('*') || field == "?"
}

const DAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// Why a schedule's `cron` or `timeZone` cannot be read; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    /// `timeZone` names no zone of the time zone database.
    #[error("timeZone {zone:?}: {source}")]
    TimeZone {
        /// The zone as given.
        zone: String,
        /// Why jiff does not know it.
        #[source]
        source: jiff::Error,
    },
    /// `cron` has neither five nor six fields, and is no `@` macro.
    #[error(
        "cron {cron:?} has {fields} fields: give five (minute hour day-of-month month \
         day-of-week), six with a leading seconds field, or @hourly/@daily/@weekly/\
         @monthly/@yearly"
    )]
    FieldCount {
        /// The expression as given.
        cron: String,
        /// How many fields it has.
        fields: usize,
    },
    /// The day-of-week field of `cron` is wrong.
    #[error("cron {cron:?}: {source}")]
    DayOfWeek {
        /// The expression as given.
        cron: String,
        /// What is wrong with the field.
        #[source]
        source: DayOfWeekError,
    },
    /// The cron library does not read the expression.
    #[error("cron {cron:?}: {source}")]
    Cron {
        /// The expression as given.
        cron: String,
        /// Why the library refused it.
        #[source]
        source: jiff_cron::error::Error,
    },
}

/// What is wrong with a day-of-week field of a cron expression.
#[derive(Debug, thiserror::Error)]
pub enum DayOfWeekError {
    /// A day number above 7.
    #[error("day of week {0} is not 0-7")]
    OutOfRange(usize),
    /// A `/step` that is not a positive number.
    #[error("bad step in {item:?}")]
    BadStep {
        /// The item of the field (`1-5/x`).
        item: String,
        /// Why the step is no number; `None` for a step of zero.
        #[source]
        source: Option<std::num::ParseIntError>,
    },
    /// A range whose start is after its end.
    #[error("day-of-week range {0:?} runs backwards")]
    Backwards(String),
}

/// The step of a day-of-week item (`1-5/2`): a number above zero.
fn day_step(item: &str, step: &str) -> Result<usize, DayOfWeekError> {
    match step.parse::<usize>() {
        Ok(s) if s > 0 => Ok(s),
        Ok(_) => Err(DayOfWeekError::BadStep {
            item: item.to_owned(),
            source: None,
        }),
        Err(e) => Err(DayOfWeekError::BadStep {
            item: item.to_owned(),
            source: Some(e),
        }),
    }
}

/// A standard day-of-week field (0–7, both 0 and 7 Sunday) in the names the cron library reads
/// unambiguously (it numbers Sunday 1).
fn day_of_week(field: &str) -> Result<String, DayOfWeekError> {
    let day = |s: &str| -> Result<Option<usize>, DayOfWeekError> {
        match s.parse::<usize>() {
            Ok(n @ 0..=7) => Ok(Some(n % 7)),
            Ok(n) => Err(DayOfWeekError::OutOfRange(n)),
            Err(_) => Ok(None),
        }
    };
    let mut out = Vec::new();
    for item in field.split(',') {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, Some(day_step(item, s)?)),
            None => (item, None),
        };
        let bounds = match range.split_once('-') {
            Some((a, b)) => (day(a)?, day(b)?, true),
            None => (day(range)?, None, false),
        };
        match bounds {
            // Names and `*` (with or without a step) mean the same in both numberings.
            (None, _, _) | (Some(_), None, true) => out.push(item.to_owned()),
            (Some(a), None, false) => match step {
                None => out.push(DAYS[a].to_owned()),
                Some(s) => out.extend((a..7).step_by(s).map(|d| DAYS[d].to_owned())),
            },
            (Some(a), Some(b), _) => {
                // `5-7` ends on Sunday (7), which is 0 here.
                let b = if b == 0 && range.ends_with('7') { 7 } else { b };
                if a > b {
                    return Err(DayOfWeekError::Backwards(range.to_owned()));
                }
                out.extend(
                    (a..=b)
                        .step_by(step.unwrap_or(1))
                        .map(|d| DAYS[d % 7].to_owned()),
                );
            }
        }
    }
    out.dedup();
    Ok(out.join(","))
}

/// Read a schedule's `cron` and `timeZone`.
pub fn timetable(spec: &ScheduleSpec) -> Result<Timetable, ScheduleError> {
    let zone = spec.time_zone.as_deref().unwrap_or("UTC");
    let tz = TimeZone::get(zone).map_err(|source| ScheduleError::TimeZone {
        zone: zone.to_owned(),
        source,
    })?;
    let text = spec.cron.trim();
    let exprs = if text.starts_with('@') {
        vec![text.to_owned()]
    } else {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let (seconds, rest) = match fields.len() {
            5 => ("0", &fields[..]),
            6 => (fields[0], &fields[1..]),
            n => {
                return Err(ScheduleError::FieldCount {
                    cron: text.to_owned(),
                    fields: n,
                });
            }
        };
        let dow = day_of_week(rest[4]).map_err(|source| ScheduleError::DayOfWeek {
            cron: text.to_owned(),
            source,
        })?;
        let (minute, hour, dom, month) = (rest[0], rest[1], rest[2], rest[3]);
        if unrestricted(dom) || unrestricted(rest[4]) {
            vec![format!("{seconds} {minute} {hour} {dom} {month} {dow}")]
        } else {
            vec![
                format!("{seconds} {minute} {hour} {dom} {month} *"),
                format!("{seconds} {minute} {hour} * {month} {dow}"),
            ]
        }
    };
    let crons = exprs
        .iter()
        .map(|expr| jiff_cron::Schedule::from_str(expr))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|source| ScheduleError::Cron {
            cron: text.to_owned(),
            source,
        })?;
    Ok(Timetable { crons, tz })
}

impl Timetable {
    /// The first time strictly after `t`.
    pub fn next_after(&self, t: Timestamp) -> Option<Timestamp> {
        let from = t.to_zoned(self.tz.clone());
        self.crons
            .iter()
            .filter_map(|c| c.after(from.clone()).next())
            .map(|z| z.timestamp())
            .min()
    }
}

/// What a schedule should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The time to start a Run for now: the latest one due since the last, if any.
    pub due: Option<Timestamp>,
    /// Times that passed since the last without a Run (the due one not counted).
    pub missed: usize,
    /// The latest time that passed but is past `startingDeadline`, so is not made up for.
    pub too_late: Option<Timestamp>,
    /// When to look again: the next time after now.
    pub next: Option<Timestamp>,
}

/// How far back a scheduler that meets a schedule with no Run yet looks for a time it owes:
/// the first time may have passed while no scheduler ran (a restart, a handover).
pub const FIRST_LOOK_BACK: jiff::SignedDuration = jiff::SignedDuration::from_mins(5);

/// Where a schedule with no Run yet, met `now` by a scheduler, starts owing times: up to
/// [`FIRST_LOOK_BACK`] ago, never before its Workflow was `created`.
pub fn first_owed(now: Timestamp, created: Option<Timestamp>) -> Timestamp {
    let back = now - FIRST_LOOK_BACK;
    created.map_or(back, |c| c.max(back).min(now))
}

/// Which time a schedule owes a Run, given the last time it started one (or, for a schedule
/// that never did, when it was first seen) and now.
pub fn plan(tt: &Timetable, spec: &ScheduleSpec, since: Timestamp, now: Timestamp) -> Plan {
    let next = tt.next_after(now);
    if spec.suspend {
        return Plan {
            due: None,
            missed: 0,
            too_late: None,
            next: None,
        };
    }
    let mut latest = None;
    let mut passed = 0usize;
    let mut t = since;
    while let Some(n) = tt.next_after(t).filter(|n| *n <= now) {
        latest = Some(n);
        passed += 1;
        t = n;
        if passed >= MAX_MISSED {
            latest = latest_before(tt, t, now).or(latest);
            break;
        }
    }
    let deadline = spec
        .starting_deadline
        .as_deref()
        .and_then(|d| duration::parse(d).ok());
    let in_time = |at: Timestamp| deadline.is_none_or(|d| now.duration_since(at) <= d);
    match latest {
        Some(at) if in_time(at) => Plan {
            due: Some(at),
            missed: passed - 1,
            too_late: None,
            next,
        },
        Some(at) => Plan {
            due: None,
            missed: passed,
            too_late: Some(at),
            next,
        },
        None => Plan {
            due: None,
            missed: 0,
            too_late: None,
            next,
        },
    }
}

/// The latest time at or before `now` and after `from`, found by looking back from `now` in
/// growing windows (for a schedule that missed more times than are worth counting).
fn latest_before(tt: &Timetable, from: Timestamp, now: Timestamp) -> Option<Timestamp> {
    const WINDOWS: [i64; 7] = [1, 60, 3_600, 86_400, 2_678_400, 31_622_400, 126_489_600];
    for w in WINDOWS {
        let start = (now - jiff::SignedDuration::from_secs(w)).max(from);
        let Some(mut last) = tt.next_after(start).filter(|n| *n <= now) else {
            continue;
        };
        while let Some(n) = tt.next_after(last).filter(|n| *n <= now) {
            last = n;
        }
        return Some(last);
    }
    None
}

/// What the concurrency policy says when a Run is due and `active` Runs of the schedule have
/// not finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// Start it.
    Start,
    /// Skip this time.
    Skip,
    /// Cancel the unfinished Runs, then start it.
    Replace,
}

/// The concurrency policy's answer.
pub fn admit(spec: &ScheduleSpec, active: usize) -> Admit {
    match (spec.concurrency_policy, active) {
        (_, 0) | (ConcurrencyPolicy::Allow, _) => Admit::Start,
        (ConcurrencyPolicy::Forbid, _) => Admit::Skip,
        (ConcurrencyPolicy::Replace, _) => Admit::Replace,
    }
}

/// One finished Run of a schedule, for the history limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The Run's name.
    pub name: String,
    /// The time it was started for.
    pub scheduled_for: Timestamp,
    /// Whether it succeeded.
    pub succeeded: bool,
}

/// The finished Runs the history limits let go. The newest Run of the schedule is kept
/// whatever the limits say: it marks where the schedule stands. `newest` is the time of the
/// newest Run of the schedule, finished or not.
pub fn prune(spec: &ScheduleSpec, newest: Option<Timestamp>, finished: &[Finished]) -> Vec<String> {
    let keep_ok = spec
        .successful_runs_history_limit
        .unwrap_or(DEFAULT_SUCCEEDED_KEPT) as usize;
    let keep_failed = spec
        .failed_runs_history_limit
        .unwrap_or(DEFAULT_FAILED_KEPT) as usize;
    let mut sorted: Vec<&Finished> = finished.iter().collect();
    sorted.sort_by(|a, b| (b.scheduled_for, &b.name).cmp(&(a.scheduled_for, &a.name)));
    let (mut ok, mut failed) = (0usize, 0usize);
    let mut out = Vec::new();
    for f in sorted {
        let count = if f.succeeded { &mut ok } else { &mut failed };
        *count += 1;
        let limit = if f.succeeded { keep_ok } else { keep_failed };
        if *count > limit && Some(f.scheduled_for) != newest {
            out.push(f.name.clone());
        }
    }
    out
}

/// The name of the Run a schedule starts for `at`: a taskId like every other, its 128 bits an
/// HMAC under `key` (the server's state key) of the namespace, Workflow, schedule and time.
/// The same firing always gets the same name, so two schedulers (or one after a restart)
/// cannot both start it, and nobody without the key can name a scheduled Run in advance.
pub fn run_name(
    key: &[u8],
    namespace: &str,
    workflow: &str,
    schedule: &str,
    at: Timestamp,
) -> String {
    use hmac::{KeyInit, Mac};
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    for part in [namespace, workflow, schedule, &at.as_second().to_string()] {
        mac.update(part.as_bytes());
        mac.update(&[0]);
    }
    let digest = mac.finalize().into_bytes();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    crate::api::task_id_from(workflow, &b)
}

/// The user name scheduled Runs are requested by.
pub fn requester(workflow: &str, schedule: &str) -> String {
    format!("runway:schedule:{workflow}/{schedule}")
}

/// The parts a scheduled Run's seal covers: namespace, name, Workflow, schedule and time.
pub fn sealed_parts<'a>(run: &'a Run, workflow: &'a str, schedule: &'a str) -> [&'a str; 5] {
    [
        run.metadata.namespace.as_deref().unwrap_or_default(),
        run.metadata.name.as_deref().unwrap_or_default(),
        workflow,
        schedule,
        run.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotations::SCHEDULED_FOR))
            .map(String::as_str)
            .unwrap_or_default(),
    ]
}

/// The seal a Run carries, if any.
pub fn mark_of(run: &Run) -> Option<&str> {
    run.metadata
        .annotations
        .as_ref()?
        .get(annotations::MARK)
        .map(String::as_str)
}

/// When a finished Run of a schedule that is gone (removed or renamed, or its Workflow
/// deleted) is deleted: no history limit keeps it any more, so its time to live does, read
/// from its own snapshot and counted from its end as for any Run. `None` keeps it: it has not
/// finished, still owes cleanups, or its Workflow set no `ttlAfterFinished`.
pub fn orphan_delete_at(run: &Run) -> Option<Timestamp> {
    let st = run.status.as_ref()?;
    if !st.phase.is_terminal() || !st.cleanups.is_empty() {
        return None;
    }
    let ttl = st
        .workflow
        .as_ref()?
        .get("execution")?
        .get("ttlAfterFinished")?
        .as_str()?;
    let ttl = duration::parse(ttl).ok()?;
    let finished: Timestamp = st.finished_at.as_deref()?.parse().ok()?;
    Some(finished + ttl)
}

/// The schedule time a scheduled Run was started for.
pub fn scheduled_for(run: &Run) -> Option<Timestamp> {
    run.metadata
        .annotations
        .as_ref()?
        .get(annotations::SCHEDULED_FOR)?
        .parse()
        .ok()
}

/// Whether `workflow` (`None`: it is gone) keeps the history of its schedule `name`: while it
/// lists it, or while it is not Ready — a Workflow edited into an invalid state (a manifest
/// that does not parse lists no schedules at all) keeps its schedules' Runs until it is valid
/// again and says.
pub fn keeps_history(workflow: Option<&Workflow>, name: &str) -> bool {
    workflow.is_some_and(|w| !w.is_ready() || w.spec.schedules.iter().any(|s| s.name == name))
}

/// Whether `run` is one the scheduler started for `workflow`'s schedule `schedule`: its seal
/// holds. A Run that merely carries the schedule's label and a time (anyone who may create
/// Runs can write those) is not.
pub fn started_by(marks: &Marks, run: &Run, workflow: &str, schedule: &str) -> bool {
    marks.verify(
        Sealed::Scheduled,
        &sealed_parts(run, workflow, schedule),
        mark_of(run),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_schedule_met_first_owes_the_last_minutes_never_before_its_workflow() {
        let now: Timestamp = "2026-12-07T09:02:00Z".parse().unwrap();
        let long_ago: Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
        let just_now: Timestamp = "2026-12-07T09:01:00Z".parse().unwrap();
        let back: Timestamp = "2026-12-07T08:57:00Z".parse().unwrap();
        assert_eq!(first_owed(now, None), back);
        assert_eq!(first_owed(now, Some(long_ago)), back);
        assert_eq!(first_owed(now, Some(just_now)), just_now);
        // A clock behind the API server's: never later than now.
        let ahead: Timestamp = "2026-12-07T09:03:00Z".parse().unwrap();
        assert_eq!(first_owed(now, Some(ahead)), now);
        // 09:00 passed while no scheduler ran (it first met the schedule at 09:02): owed.
        let spec: ScheduleSpec =
            serde_json::from_value(serde_json::json!({"name": "s", "cron": "0 9 * * *"})).unwrap();
        let tt = timetable(&spec).unwrap();
        let plan = plan(&tt, &spec, first_owed(now, Some(long_ago)), now);
        assert_eq!(plan.due, Some("2026-12-07T09:00:00Z".parse().unwrap()));
    }

    use super::*;
    use serde_json::json;

    #[test]
    fn a_workflow_keeps_its_schedules_history_while_it_lists_them_or_is_not_valid() {
        let listing = |names: &[&str], valid: bool| {
            let schedules: Vec<_> = names
                .iter()
                .map(|n| json!({"name": n, "cron": "0 2 * * *"}))
                .collect();
            let spec = serde_json::from_value(json!({"steps": [], "schedules": schedules}));
            let mut wf = Workflow::new("w", spec.unwrap());
            wf.metadata.generation = Some(1);
            let now = Timestamp::UNIX_EPOCH;
            let why = if valid { "Valid" } else { "InvalidManifest" };
            wf.status = Some(crate::api::WorkflowStatus::ready(
                &wf,
                None,
                valid,
                why,
                String::new(),
                now,
            ));
            wf
        };
        assert!(keeps_history(Some(&listing(&["nightly"], true)), "nightly"));
        assert!(!keeps_history(
            Some(&listing(&["renamed"], true)),
            "nightly"
        ));
        assert!(!keeps_history(None, "nightly"));
        // A manifest that does not parse stands for a Workflow listing nothing, not Ready.
        assert!(keeps_history(Some(&listing(&[], false)), "nightly"));
    }

    fn spec(v: serde_json::Value) -> ScheduleSpec {
        let mut base = json!({"name": "nightly", "cron": "0 2 * * *"});
        base.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        serde_json::from_value(base).unwrap()
    }

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn five_fields_read_as_a_cronjob_reads_them_in_the_given_zone() {
        let tt = timetable(&spec(
            json!({"cron": "30 9 * * 1-5", "timeZone": "Europe/Berlin"}),
        ))
        .unwrap();
        // Friday 2027-01-15 10:00 Berlin → next is Monday 09:30 Berlin (08:30 UTC).
        let next = tt.next_after(at("2027-01-15T09:00:00Z")).unwrap();
        assert_eq!(next, at("2027-01-18T08:30:00Z"));
        // In summer Berlin is UTC+2.
        let next = tt.next_after(at("2027-07-01T00:00:00Z")).unwrap();
        assert_eq!(next, at("2027-07-01T07:30:00Z"));
        // 0 and 7 are Sunday; 5-7 is Friday to Sunday.
        let sunday = timetable(&spec(json!({"cron": "0 12 * * 0"}))).unwrap();
        assert_eq!(
            sunday.next_after(at("2027-01-15T00:00:00Z")),
            Some(at("2027-01-17T12:00:00Z"))
        );
        let weekend = timetable(&spec(json!({"cron": "0 12 * * 5-7"}))).unwrap();
        assert_eq!(
            weekend.next_after(at("2027-01-11T00:00:00Z")),
            Some(at("2027-01-15T12:00:00Z"))
        );
        let seven = timetable(&spec(json!({"cron": "0 12 * * 7"}))).unwrap();
        assert_eq!(
            seven.next_after(at("2027-01-15T00:00:00Z")),
            Some(at("2027-01-17T12:00:00Z"))
        );
        assert_eq!(day_of_week("1-5").unwrap(), "MON,TUE,WED,THU,FRI");
        assert_eq!(day_of_week("*/2").unwrap(), "*/2");
        assert_eq!(day_of_week("MON-FRI").unwrap(), "MON-FRI");
        assert_eq!(day_of_week("0,3").unwrap(), "SUN,WED");
        assert_eq!(day_of_week("1-6/2").unwrap(), "MON,WED,FRI");
    }

    #[test]
    fn with_both_day_fields_restricted_either_one_matching_is_a_time_as_in_a_cronjob() {
        let tt = timetable(&spec(json!({"cron": "0 9 1,15 * 1"}))).unwrap();
        let mut times = Vec::new();
        let mut t = at("2026-12-01T10:00:00Z");
        for _ in 0..7 {
            t = tt.next_after(t).unwrap();
            times.push(t);
        }
        // Mondays, and the 1st and the 15th whatever weekday they are.
        let want = [
            "2026-12-07T09:00:00Z",
            "2026-12-14T09:00:00Z",
            "2026-12-15T09:00:00Z",
            "2026-12-21T09:00:00Z",
            "2026-12-28T09:00:00Z",
            "2027-01-01T09:00:00Z",
            "2027-01-04T09:00:00Z",
        ]
        .map(at);
        assert_eq!(times, want);
        // A day field that lets every day through leaves the other one alone to decide:
        // `*/2` days of the month on Mondays are the odd-numbered Mondays.
        let odd_mondays = timetable(&spec(json!({"cron": "0 9 */2 * MON"}))).unwrap();
        assert_eq!(
            odd_mondays.next_after(at("2026-12-01T10:00:00Z")),
            Some(at("2026-12-07T09:00:00Z"))
        );
        assert_eq!(
            odd_mondays.next_after(at("2026-12-07T10:00:00Z")),
            Some(at("2026-12-21T09:00:00Z"))
        );
        let first_only = timetable(&spec(json!({"cron": "0 9 1 * ?"}))).unwrap();
        assert_eq!(
            first_only.next_after(at("2026-12-01T10:00:00Z")),
            Some(at("2027-01-01T09:00:00Z"))
        );
    }

    #[test]
    fn six_fields_and_macros_work_and_nonsense_is_refused_with_why() {
        let every_second = timetable(&spec(json!({"cron": "* * * * * *"}))).unwrap();
        assert_eq!(
            every_second.next_after(at("2027-01-15T00:00:00Z")),
            Some(at("2027-01-15T00:00:01Z"))
        );
        let daily = timetable(&spec(json!({"cron": "@daily"}))).unwrap();
        assert_eq!(
            daily.next_after(at("2027-01-15T10:00:00Z")),
            Some(at("2027-01-16T00:00:00Z"))
        );
        for (cron, tz, says) in [
            ("0 2 * *", None, "has 4 fields"),
            ("61 2 * * *", None, "cron"),
            ("0 2 * * 8", None, "not 0-7"),
            ("0 2 * * 5-1", None, "backwards"),
            ("0 2 * * *", Some("Mars/Olympus"), "timeZone"),
        ] {
            let e = timetable(&spec(json!({"cron": cron, "timeZone": tz})))
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{cron}: {e}");
        }
    }

    #[test]
    fn the_latest_missed_time_is_due_once_within_the_starting_deadline() {
        let s = spec(json!({"cron": "0 * * * *"}));
        let tt = timetable(&s).unwrap();
        // Last Run for 07:00; down until 10:20: 08, 09 and 10 passed; 10:00 is due.
        let p = plan(
            &tt,
            &s,
            at("2027-01-15T07:00:00Z"),
            at("2027-01-15T10:20:00Z"),
        );
        assert_eq!(p.due, Some(at("2027-01-15T10:00:00Z")));
        assert_eq!(p.missed, 2);
        assert_eq!(p.next, Some(at("2027-01-15T11:00:00Z")));
        // Nothing due between two times.
        let p = plan(
            &tt,
            &s,
            at("2027-01-15T10:00:00Z"),
            at("2027-01-15T10:59:59Z"),
        );
        assert_eq!(p.due, None);
        // Exactly on time.
        let p = plan(
            &tt,
            &s,
            at("2027-01-15T10:00:00Z"),
            at("2027-01-15T11:00:00Z"),
        );
        assert_eq!(p.due, Some(at("2027-01-15T11:00:00Z")));
        // With a starting deadline of 5 minutes, 10:00 seen at 10:20 is too late.
        let strict = spec(json!({"cron": "0 * * * *", "startingDeadline": "5m"}));
        let p = plan(
            &tt,
            &strict,
            at("2027-01-15T07:00:00Z"),
            at("2027-01-15T10:20:00Z"),
        );
        assert_eq!(p.due, None);
        assert_eq!(p.too_late, Some(at("2027-01-15T10:00:00Z")));
        let p = plan(
            &tt,
            &strict,
            at("2027-01-15T07:00:00Z"),
            at("2027-01-15T10:04:00Z"),
        );
        assert_eq!(p.due, Some(at("2027-01-15T10:00:00Z")));
        // Suspended: nothing, and no wake-up (a change to the Workflow wakes the scheduler).
        let off = spec(json!({"cron": "0 * * * *", "suspend": true}));
        let p = plan(
            &tt,
            &off,
            at("2027-01-15T07:00:00Z"),
            at("2027-01-15T10:20:00Z"),
        );
        assert_eq!((p.due, p.next), (None, None));
        // A fast schedule down for long: counted up to a bound, the latest still due.
        let fast = spec(json!({"cron": "* * * * * *"}));
        let tt = timetable(&fast).unwrap();
        let p = plan(
            &tt,
            &fast,
            at("2027-01-15T00:00:00Z"),
            at("2027-01-16T00:00:00Z"),
        );
        assert_eq!(p.due, Some(at("2027-01-16T00:00:00Z")));
    }

    #[test]
    fn policies_answer_as_a_cronjob_does() {
        assert_eq!(admit(&spec(json!({})), 3), Admit::Start);
        assert_eq!(
            admit(&spec(json!({"concurrencyPolicy": "Forbid"})), 1),
            Admit::Skip
        );
        assert_eq!(
            admit(&spec(json!({"concurrencyPolicy": "Forbid"})), 0),
            Admit::Start
        );
        assert_eq!(
            admit(&spec(json!({"concurrencyPolicy": "Replace"})), 2),
            Admit::Replace
        );
    }

    #[test]
    fn history_limits_keep_the_newest_of_each_kind_and_the_newest_run() {
        let f = |name: &str, h: u32, ok: bool| Finished {
            name: name.into(),
            scheduled_for: at(&format!("2027-01-15T{h:02}:00:00Z")),
            succeeded: ok,
        };
        let finished = vec![
            f("a", 1, true),
            f("b", 2, false),
            f("c", 3, true),
            f("d", 4, false),
            f("e", 5, true),
            f("g", 6, true),
        ];
        let s = spec(json!({"successfulRunsHistoryLimit": 2}));
        let mut gone = prune(&s, Some(at("2027-01-15T06:00:00Z")), &finished);
        gone.sort();
        assert_eq!(gone, ["a", "b", "c"]);
        let none = spec(json!({"successfulRunsHistoryLimit": 0, "failedRunsHistoryLimit": 0}));
        let mut gone = prune(&none, Some(at("2027-01-15T06:00:00Z")), &finished);
        gone.sort();
        assert_eq!(gone, ["a", "b", "c", "d", "e"], "g is the newest: kept");
    }

    #[test]
    fn run_names_are_keyed_stable_short_and_distinct() {
        let t = at("2027-01-15T02:00:00Z");
        let name = |key: &[u8], ns: &str, wf: &str, at| run_name(key, ns, wf, "nightly", at);
        let first = name(b"key", "prod", "report", t);
        // A taskId like any other: the Workflow's name, then 128 bits in base32.
        let (prefix, bits) = first.rsplit_once('-').unwrap();
        assert_eq!(prefix, "report");
        assert_eq!(bits.len(), 26);
        assert_eq!(
            first,
            name(b"key", "prod", "report", t),
            "the same firing, the same name"
        );
        for other in [
            name(b"other key", "prod", "report", t),
            name(b"key", "dev", "report", t),
            name(
                b"key",
                "prod",
                "report",
                t + jiff::SignedDuration::from_secs(60),
            ),
            run_name(b"key", "prod", "report", "hourly", t),
        ] {
            assert_ne!(first, other);
        }
        let long = name(b"key", "prod", &"w".repeat(60), t);
        assert!(long.len() <= 63, "{long}");
        assert!(crate::api::is_dns_subdomain(&long));
    }
}

#[cfg(test)]
mod validation {
    use serde_json::json;

    use crate::api::{WorkflowSpec, reasons};
    use crate::engine::validate::{Capabilities, spec};

    fn check(schedules: serde_json::Value) -> Result<(), String> {
        let wf: WorkflowSpec = serde_json::from_value(json!({
            "tool": {"inputSchema": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}},
            "steps": [{"name": "s", "delay": {"duration": "1s"}}],
            "schedules": schedules,
        }))
        .unwrap();
        spec(&wf, Capabilities { jobs: false }).map_err(|e| {
            assert_eq!(e.reason, reasons::INVALID_SCHEDULE, "{e}");
            e.message
        })
    }

    #[test]
    fn schedules_are_checked_when_the_workflow_is() {
        assert!(
            check(json!([{"name": "nightly", "cron": "0 2 * * *", "arguments": {"env": "prod"}}]))
                .is_ok()
        );
        for (schedules, says) in [
            (
                json!([{"name": "n", "cron": "0 2 * *", "arguments": {"env": "x"}}]),
                "schedules[n]: cron",
            ),
            (
                json!([{"name": "n", "cron": "0 2 * * *", "timeZone": "Nowhere/City", "arguments": {"env": "x"}}]),
                "timeZone",
            ),
            (
                json!([{"name": "n", "cron": "0 2 * * *"}]),
                "arguments do not match tool.inputSchema",
            ),
            (
                json!([{"name": "n", "cron": "0 2 * * *", "arguments": {"env": "x"}, "startingDeadline": "soon"}]),
                "startingDeadline",
            ),
            (
                json!([{"name": "Nightly", "cron": "0 2 * * *", "arguments": {"env": "x"}}]),
                "DNS label",
            ),
            (
                json!([{"name": "n", "cron": "0 2 * * *", "arguments": {"env": "x"}}, {"name": "n", "cron": "@daily", "arguments": {"env": "y"}}]),
                "used twice",
            ),
            (
                json!([{"name": "n", "cron": "0 99 * * *", "arguments": {"env": "x"}}]),
                "schedules[n]: cron \"0 99 * * *\"",
            ),
        ] {
            let e = check(schedules.clone()).unwrap_err();
            assert!(e.contains(says), "{schedules}: {e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
    }
}
