//! A Run's Workflow snapshot as one decision reads it: parsed from the status once, and again
//! only when the status holds another snapshot.

use std::cell::RefCell;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::api::WorkflowSpec;

/// The snapshot last parsed, with the value it was parsed from.
#[derive(Default)]
pub(super) struct Snapshot(RefCell<Option<(Arc<Value>, Arc<WorkflowSpec>)>>);

impl Snapshot {
    /// The Workflow in `value` (a Run's `status.workflow`); `None` without one or when it does
    /// not parse.
    pub(super) fn read(&self, value: Option<&Arc<Value>>) -> Option<Arc<WorkflowSpec>> {
        let value = value?;
        let mut last = self.0.borrow_mut();
        if let Some((from, wf)) = last.as_ref()
            && Arc::ptr_eq(from, value)
        {
            return Some(wf.clone());
        }
        let wf = Arc::new(WorkflowSpec::deserialize(&**value).ok()?);
        *last = Some((value.clone(), wf.clone()));
        Some(wf)
    }
}
