//! Following a reflector's stream for the life of the process, and waiting for its cache to
//! fill at start-up for a bounded time: a cache that can never fill (an object it cannot
//! decode, an API server that refuses the list) must end the start with the reason instead of
//! leaving a replica unready for ever.

use std::fmt::Display;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::runtime::reflector::Store;

use super::StoreError;

/// How long a cache may take to fill at start-up before the process gives up with the watch's
/// last error (a cache that can never fill, say because an object cannot be decoded, must not
/// leave a replica waiting, unready, for ever).
const CACHE_FILL: Duration = Duration::from_secs(120);

/// Drive a reflector's `stream` in a task of its own, calling `touched` for every object it
/// applies; the watch's last error (for [`filled`] to give as the reason) is returned.
pub(super) fn follow<S, K, E>(
    stream: S,
    kind: &'static str,
    touched: impl Fn() + Send + Sync + 'static,
) -> Arc<Mutex<Option<String>>>
where
    S: Stream<Item = Result<K, E>> + Send + 'static,
    K: Send,
    E: Display + Send,
{
    let last_error = Arc::new(Mutex::new(None::<String>));
    let seen = Arc::clone(&last_error);
    tokio::spawn(async move {
        stream
            .for_each(|r| {
                match r {
                    Ok(_) => touched(),
                    Err(e) => {
                        tracing::warn!(error = %e, kind, "watch error; retrying");
                        *seen.lock().expect("error lock") = Some(e.to_string());
                    }
                }
                std::future::ready(())
            })
            .await;
    });
    last_error
}

/// Wait until `reader` holds the first list, for at most [`CACHE_FILL`].
pub(super) async fn filled<K>(
    reader: &Store<K>,
    kind: &str,
    last_error: &Mutex<Option<String>>,
) -> Result<(), StoreError>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    match tokio::time::timeout(CACHE_FILL, reader.wait_until_ready()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(StoreError::Backend(e.to_string())),
        Err(_) => {
            let why = last_error
                .lock()
                .expect("error lock")
                .clone()
                .unwrap_or_else(|| "no list arrived".into());
            Err(StoreError::Backend(format!(
                "the {kind} cache did not fill within {}s: {why}",
                CACHE_FILL.as_secs()
            )))
        }
    }
}
