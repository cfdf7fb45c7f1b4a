//! Waiting for a reflector cache to fill at start-up, for a bounded time: a cache that can
//! never fill (an object it cannot decode, an API server that refuses the list) must end the
//! start with the reason instead of leaving a replica unready for ever.

use std::sync::Mutex;
use std::time::Duration;

use kube::runtime::reflector::Store;

use super::StoreError;

/// How long a cache may take to fill at start-up before the process gives up with the watch's
/// last error (a cache that can never fill, say because an object cannot be decoded, must not
/// leave a replica waiting, unready, for ever).
const CACHE_FILL: Duration = Duration::from_secs(120);

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
