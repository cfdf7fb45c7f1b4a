//! How many `http` attempts one process makes at once, in all and per namespace. Attempts of
//! steps that run side by side (`forEach`, `dependsOn`) run outside the controller's workers,
//! so nothing else bounds them: one tenant's fan-out against a server that answers slowly, or
//! never, would hold a socket and a task per item, and take every attempt's turn from the
//! other namespaces.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Most `http` attempts in progress in one process.
pub const HTTP_ATTEMPTS: usize = 512;
/// Most `http` attempts of one namespace in progress in one process: a quarter, so that the
/// others still have their turns while one namespace is at its share.
pub const HTTP_ATTEMPTS_PER_NAMESPACE: usize = HTTP_ATTEMPTS / 4;

/// How many namespaces' semaphores are kept before the idle ones are let go.
const KEPT_NAMESPACES: usize = 1024;

/// The slots of one process.
pub(crate) struct Slots {
    all: Arc<Semaphore>,
    per_namespace: usize,
    namespaces: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// A slot taken: held while the attempt runs, given back when dropped.
pub(crate) struct Slot {
    _namespace: OwnedSemaphorePermit,
    _all: OwnedSemaphorePermit,
}

impl Slots {
    /// `all` slots in all, at most `per_namespace` of them held by one namespace.
    pub(crate) fn new(all: usize, per_namespace: usize) -> Self {
        Self {
            all: Arc::new(Semaphore::new(all)),
            per_namespace,
            namespaces: Mutex::default(),
        }
    }

    /// A slot for an attempt of a Run in `namespace`, once one is free. The namespace's share
    /// is taken first, so that attempts waiting on their own namespace's share do not hold
    /// slots of the whole process meanwhile; both semaphores are fair (first come, first
    /// served).
    pub(crate) async fn take(&self, namespace: &str) -> Slot {
        let own = {
            let mut namespaces = self.namespaces.lock().expect("slots lock");
            // Namespaces come and go (a CI cluster makes one per run): the semaphores nobody
            // holds or waits on (the map's is the only reference) go once there are many.
            if namespaces.len() >= KEPT_NAMESPACES {
                namespaces.retain(|_, s| Arc::strong_count(s) > 1);
            }
            let per = self.per_namespace;
            namespaces
                .entry(namespace.to_owned())
                .or_insert_with(|| Arc::new(Semaphore::new(per)))
                .clone()
        };
        let own = own.acquire_owned().await.expect("never closed");
        let all = self
            .all
            .clone()
            .acquire_owned()
            .await
            .expect("never closed");
        Slot {
            _namespace: own,
            _all: all,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_namespace_at_its_share_waits_and_leaves_the_rest_to_others() {
        let slots = Arc::new(Slots::new(3, 2));
        let take = |ns: &'static str| {
            let slots = slots.clone();
            tokio::spawn(async move { slots.take(ns).await })
        };
        let a1 = slots.take("a").await;
        let _a2 = slots.take("a").await;
        // "a" is at its share: its third attempt waits, holding no slot of the process.
        let a3 = take("a");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!a3.is_finished());
        let b1 = slots.take("b").await;
        // Now the process is full: "b" waits too.
        let b2 = take("b");
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!b2.is_finished());
        // A slot given back goes to who waited for the process first: "b", not "a".
        drop(a1);
        let _b2 = b2.await.unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!a3.is_finished());
        drop(b1);
        a3.await.unwrap();
    }

    #[tokio::test]
    async fn the_semaphores_of_namespaces_nobody_uses_are_let_go() {
        let slots = Slots::new(4, 1);
        let held = slots.take("kept").await;
        for i in 0..KEPT_NAMESPACES - 1 {
            drop(slots.take(&format!("ns-{i}")).await);
        }
        let _one_more = slots.take("last").await;
        let namespaces = slots.namespaces.lock().unwrap();
        assert_eq!(namespaces.len(), 2, "the held one and the new one");
        assert!(namespaces.contains_key("kept"));
        drop(namespaces);
        drop(held);
    }
}
