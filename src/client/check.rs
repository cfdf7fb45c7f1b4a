//! `runway check`: whether a Runway server is up — its readiness endpoint and its MCP endpoint
//! — for the chart's `helm test` hook and for scripts.

use super::errors::ClientError;
use super::exit;
use super::output::{out, shown};
use super::target::{Target, connect};

/// How long the readiness request may take.
const READY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `runway check`: `ready` (a `/readyz` URL) must answer 2xx, then the MCP endpoint must
/// answer discovery for the target's token. Prints the server's name and version.
pub async fn check(target: &Target, ready: Option<&str>) -> Result<u8, ClientError> {
    if let Some(url) = ready {
        let resp = reqwest::Client::new()
            .get(url)
            .timeout(READY_TIMEOUT)
            .send()
            .await
            .map_err(|e| ClientError::Unreachable(format!("cannot reach {url}: {e}")))?;
        let status = resp.status();
        let body = resp.text().await.unwrap_or_default();
        if !status.is_success() {
            return Err(ClientError::Protocol(format!(
                "{url} answered HTTP {}: {}",
                status.as_u16(),
                shown(body.trim())
            )));
        }
        eprintln!("{url}: {}", shown(body.trim()));
    }
    let session = connect(target, false).await?;
    let (name, version) = session
        .peer_info()
        .and_then(|i| i.server_info.clone())
        .map(|s| (s.name, s.version))
        .unwrap_or_default();
    out(&format!(
        "{} {} answers at {}",
        shown(&name),
        shown(&version),
        target.url
    ));
    Ok(exit::OK)
}
