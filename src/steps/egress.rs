//! Where `http` and `tool` steps may connect. Workflow authors choose URLs and callers fill
//! them in, but the requests leave from Runway's own network position; so some addresses are
//! never reached unless an operator allows them: link-local and cloud metadata addresses, the
//! unspecified and multicast addresses, and (for `runway operator`) loopback, where the
//! operator's own ports are. The check runs after DNS resolution, on every connection reqwest
//! makes (redirects included), and on IP-literal hosts before a request is sent.

use std::net::{AddrParseError, IpAddr, Ipv6Addr, SocketAddr};
use std::num::ParseIntError;
use std::sync::Arc;

/// An address range, `addr/prefix`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

/// Why a string is not an address or CIDR range.
#[derive(Debug, thiserror::Error)]
pub enum CidrError {
    /// The part before `/` is not an IP address.
    #[error("{input:?} is not an address or CIDR range")]
    Address {
        /// The string as given.
        input: String,
        /// Why it is no address.
        #[source]
        source: AddrParseError,
    },
    /// The prefix is not a number of bits the address has.
    #[error("{input:?}: the prefix must be 0-{max}")]
    Prefix {
        /// The string as given.
        input: String,
        /// The address's length in bits (32 or 128).
        max: u8,
        /// Why the prefix is no number; `None` for a number that is too large.
        #[source]
        source: Option<ParseIntError>,
    },
}

impl std::str::FromStr for Cidr {
    type Err = CidrError;

    fn from_str(s: &str) -> Result<Self, CidrError> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr.trim().parse().map_err(|source| CidrError::Address {
            input: s.to_owned(),
            source,
        })?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let bad = |source| CidrError::Prefix {
            input: s.to_owned(),
            max,
            source,
        };
        let prefix = match prefix.map(|p| p.trim().parse::<u8>()) {
            Some(Ok(p)) if p <= max => p,
            Some(Ok(_)) => return Err(bad(None)),
            Some(Err(e)) => return Err(bad(Some(e))),
            None => max,
        };
        Ok(Self { net, prefix })
    }
}

impl Cidr {
    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.net, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

/// The egress policy of one server.
#[derive(Debug, Clone, Default)]
pub struct Egress {
    /// Ranges always allowed, even when a rule below would deny them.
    pub allow: Vec<Cidr>,
    /// Ranges denied besides the fixed rules (`--egress-deny`): for `runway operator` the
    /// chart denies the private ranges where pod and Service addresses live, and the
    /// operator's own pod address.
    pub deny: Vec<Cidr>,
    /// Whether loopback addresses may be reached (`runway serve`: yes, it is a local tool;
    /// `runway operator`: no).
    pub allow_loopback: bool,
    /// The proxy every request goes through (`--egress-proxy`). Without it the proxy
    /// variables of the environment are ignored: a proxy would make the connection, so the
    /// checks here would never see the address.
    pub proxy: Option<String>,
}

/// Metadata and platform endpoints outside link-local: Alibaba Cloud's metadata service and
/// Azure's platform address.
const METADATA_V4: [std::net::Ipv4Addr; 2] = [
    std::net::Ipv4Addr::new(100, 100, 100, 200),
    std::net::Ipv4Addr::new(168, 63, 129, 16),
];

fn always_denied(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_link_local() // 169.254.0.0/16, cloud metadata among it
                || METADATA_V4.contains(&v4)
                || v4.is_unspecified()
                || v4.is_multicast()
                || v4.is_broadcast()
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return always_denied(IpAddr::V4(v4));
            }
            (v6.segments()[0] & 0xffc0) == 0xfe80 // link-local
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6 == Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254) // AWS metadata
        }
    }
}

fn loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

impl Egress {
    /// Whether a connection to `ip` is allowed.
    pub(crate) fn permits(&self, ip: IpAddr) -> bool {
        if self.allow.iter().any(|c| c.contains(ip)) {
            return true;
        }
        !(always_denied(ip)
            || (!self.allow_loopback && loopback(ip))
            || self.deny.iter().any(|c| c.contains(ip)))
    }

    /// Check a URL whose host is an IP literal (reqwest does not resolve those).
    pub(crate) fn check_url(&self, url: &reqwest::Url) -> Result<(), EgressDenied> {
        let host = url.host_str().unwrap_or_default();
        let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        else {
            return Ok(());
        };
        if self.permits(ip) {
            Ok(())
        } else {
            Err(EgressDenied(ip.to_string()))
        }
    }

    /// An HTTP client that enforces this policy: resolved addresses are filtered, and redirects
    /// are followed (up to five) only within the same origin, so that headers from Secrets
    /// never travel to another host.
    pub fn client(&self) -> reqwest::Client {
        crate::install_crypto_provider();
        let policy = self.clone();
        let redirects = reqwest::redirect::Policy::custom(move |attempt| {
            let first = attempt.previous().first().cloned();
            let too_many = attempt.previous().len() > 5;
            if too_many || first.is_some_and(|f| f.origin() != attempt.url().origin()) {
                attempt.stop()
            } else if let Err(e) = policy.check_url(attempt.url()) {
                attempt.error(e)
            } else {
                attempt.follow()
            }
        });
        let builder = reqwest::Client::builder()
            .connect_timeout(std::time::Duration::from_secs(10))
            .dns_resolver(Arc::new(Resolver(self.clone())))
            .redirect(redirects);
        let builder = match self.proxy.as_deref().map(reqwest::Proxy::all) {
            Some(Ok(proxy)) => builder.proxy(proxy),
            // A proxy URL that does not parse was refused with the flag; never fall back to
            // the environment's.
            _ => builder.no_proxy(),
        };
        builder
            .build()
            .expect("an HTTP client with these settings builds")
    }
}

/// A connection the egress policy does not allow, to the host or address named.
#[derive(Debug, thiserror::Error)]
#[error("egress to {0} is not allowed (see --egress-allow)")]
pub struct EgressDenied(String);

struct Resolver(Egress);

impl reqwest::dns::Resolve for Resolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let policy = self.0.clone();
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let allowed: Vec<SocketAddr> = all
                .iter()
                .copied()
                .filter(|a| policy.permits(a.ip()))
                .collect();
            if allowed.is_empty() && !all.is_empty() {
                return Err(EgressDenied(host).into());
            }
            Ok(Box::new(allowed.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn metadata_link_local_and_loopback_are_denied_unless_allowed() {
        let operator = Egress::default();
        for bad in [
            "169.254.169.254",
            "127.0.0.1",
            "::1",
            "fe80::1",
            "0.0.0.0",
            "::ffff:169.254.169.254",
            "fd00:ec2::254",
            "224.0.0.1",
        ] {
            assert!(!operator.permits(ip(bad)), "{bad}");
        }
        for good in ["10.0.0.5", "93.184.216.34", "2001:db8::1"] {
            assert!(operator.permits(ip(good)), "{good}");
        }
        let local = Egress {
            allow_loopback: true,
            ..Default::default()
        };
        assert!(local.permits(ip("127.0.0.1")));
        assert!(!local.permits(ip("169.254.169.254")));
        let opened = Egress {
            allow: vec!["169.254.0.0/16".parse().unwrap()],
            ..Default::default()
        };
        assert!(opened.permits(ip("169.254.169.254")));
        for metadata in ["100.100.100.200", "168.63.129.16", "::ffff:100.100.100.200"] {
            assert!(!local.permits(ip(metadata)), "{metadata}");
        }
        // Denied ranges (a cluster's pod and Service ranges, the operator's own address),
        // with an allowed range cut out of them.
        let cluster = Egress {
            deny: vec![
                "10.0.0.0/8".parse().unwrap(),
                "192.168.1.7".parse().unwrap(),
            ],
            allow: vec!["10.9.0.0/16".parse().unwrap()],
            ..Default::default()
        };
        assert!(!cluster.permits(ip("10.96.0.1")));
        assert!(!cluster.permits(ip("192.168.1.7")));
        assert!(cluster.permits(ip("10.9.3.4")));
        assert!(cluster.permits(ip("192.168.1.8")));
    }

    #[tokio::test]
    async fn names_are_checked_after_resolution() {
        // `localhost` is a name, so the check happens on the addresses it resolves to.
        let err = Egress::default()
            .client()
            .get("http://localhost:9/")
            .send()
            .await
            .unwrap_err();
        let mut chain = err.to_string();
        let mut cause = std::error::Error::source(&err);
        while let Some(c) = cause {
            chain = format!("{chain}: {c}");
            cause = c.source();
        }
        assert!(
            chain.contains("egress to localhost is not allowed"),
            "{chain}"
        );
    }

    #[tokio::test]
    async fn redirects_to_another_origin_are_not_followed() {
        use axum::response::Redirect;
        let target = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target_addr = target.local_addr().unwrap();
        let seen = Arc::new(std::sync::Mutex::new(0usize));
        let s = seen.clone();
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                *s.lock().unwrap() += 1;
                async { "reached" }
            }),
        );
        tokio::spawn(async move { axum::serve(target, app).await.unwrap() });
        let redirector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let from = redirector.local_addr().unwrap();
        let to = format!("http://{target_addr}/");
        let app = axum::Router::new().route(
            "/",
            axum::routing::get(move || {
                let to = to.clone();
                async move { Redirect::temporary(&to) }
            }),
        );
        tokio::spawn(async move { axum::serve(redirector, app).await.unwrap() });
        let local = Egress {
            allow_loopback: true,
            ..Default::default()
        };
        let resp = local
            .client()
            .get(format!("http://{from}/"))
            .header("x-api-key", "from-a-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 307, "the redirect is returned, not followed");
        assert_eq!(*seen.lock().unwrap(), 0);
    }

    #[test]
    fn ip_literal_urls_are_checked() {
        let e = Egress::default();
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        assert!(
            e.check_url(&u("http://169.254.169.254/latest/meta-data"))
                .is_err()
        );
        assert!(e.check_url(&u("http://[::1]:8080/")).is_err());
        assert!(e.check_url(&u("http://10.0.0.1/")).is_ok());
        assert!(e.check_url(&u("http://example.com/")).is_ok());
    }
}
