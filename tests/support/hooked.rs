//! The SQLite store with a hook asked before each call: what a test uses to see the calls the
//! controller or an executor makes, and to fail some of them as a troubled backend would.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use runway::api::{Run, RunPhase};
use runway::store::sqlite::SqliteStore;
use runway::store::{RunStore, StoreError, WatchEvent};

/// A call to the store, as the hook sees it.
#[derive(Debug)]
pub enum Call<'a> {
    Create(&'a Run),
    Get(&'a str),
    GetShared(&'a str),
    GetNow(&'a str),
    List,
    Update(&'a Run),
    UpdateStatus(&'a Run),
    Delete(&'a str),
    Watch,
}

/// What the hook says: go on to the store, or answer with this error.
type Hook = Box<dyn Fn(Call<'_>) -> Option<StoreError> + Send + Sync>;

/// The SQLite store, with `hook` asked before each call.
pub struct Hooked {
    inner: SqliteStore,
    hook: Hook,
}

impl Hooked {
    pub fn new(
        inner: SqliteStore,
        hook: impl Fn(Call<'_>) -> Option<StoreError> + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            hook: Box::new(hook),
        }
    }

    fn ask(&self, call: Call<'_>) -> Result<(), StoreError> {
        (self.hook)(call).map_or(Ok(()), Err)
    }
}

#[async_trait::async_trait]
impl RunStore for Hooked {
    async fn create(&self, run: Run) -> Result<Run, StoreError> {
        self.ask(Call::Create(&run))?;
        self.inner.create(run).await
    }
    async fn get(&self, ns: &str, name: &str) -> Result<Option<Run>, StoreError> {
        self.ask(Call::Get(name))?;
        self.inner.get(ns, name).await
    }
    async fn get_shared(&self, ns: &str, name: &str) -> Result<Option<Arc<Run>>, StoreError> {
        self.ask(Call::GetShared(name))?;
        self.inner.get_shared(ns, name).await
    }
    async fn get_now(&self, ns: &str, name: &str) -> Result<Option<Arc<Run>>, StoreError> {
        self.ask(Call::GetNow(name))?;
        self.inner.get_now(ns, name).await
    }
    async fn list(
        &self,
        ns: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Run>>, StoreError> {
        self.ask(Call::List)?;
        self.inner.list(ns, labels).await
    }
    async fn phase_counts(&self) -> Result<BTreeMap<RunPhase, i64>, StoreError> {
        self.inner.phase_counts().await
    }
    async fn update(&self, run: Run) -> Result<Run, StoreError> {
        self.ask(Call::Update(&run))?;
        self.inner.update(run).await
    }
    async fn update_status(&self, run: Run) -> Result<Arc<Run>, StoreError> {
        self.ask(Call::UpdateStatus(&run))?;
        self.inner.update_status(run).await
    }
    async fn delete(
        &self,
        ns: &str,
        name: &str,
        uid: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), StoreError> {
        self.ask(Call::Delete(name))?;
        self.inner.delete(ns, name, uid, version).await
    }
    fn watch(&self, rv: Option<String>) -> BoxStream<'static, Result<WatchEvent, StoreError>> {
        match self.ask(Call::Watch) {
            Ok(()) => self.inner.watch(rv),
            Err(e) => futures::stream::once(async { Err(e) }).boxed(),
        }
    }
    async fn resource_version(&self) -> Result<String, StoreError> {
        self.inner.resource_version().await
    }
}
