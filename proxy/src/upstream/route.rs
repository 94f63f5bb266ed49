//! Which SOCKS5 proxy each kind of upstream traffic goes through, and with
//! which credentials: reads (the wallet's forwarded calls and the proxy's
//! own header reads) through `upstream_proxy`, sends through `send_proxy`
//! (or the same proxy). Where a URL names no credentials, each kind gets
//! made-up ones of its own, new at each start, so that Tor
//! (`IsolateSOCKSAuth`, on by default) carries reads and sends on separate
//! circuits and the exit the sends leave by is not the reads' one.

use rand::Rng;

use crate::config::ProxyConfig;
use crate::error::UpstreamRouteError;

/// The kinds of upstream traffic kept apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Traffic {
    Reads,
    Sends,
}

impl Traffic {
    fn name(self) -> &'static str {
        match self {
            Traffic::Reads => "reads",
            Traffic::Sends => "sends",
        }
    }
}

/// The SOCKS5 proxy of each kind of traffic (None: a direct connection).
pub struct Routes {
    pub reads: Option<reqwest::Proxy>,
    pub sends: Option<reqwest::Proxy>,
}

/// The routes `config` asks for: refused where an upstream is a WebSocket
/// behind a proxy (carried over HTTP only), or where reads and sends would
/// go through the same proxy with the same credentials.
pub fn routes(config: &ProxyConfig) -> Result<Routes, UpstreamRouteError> {
    let reads = config
        .upstream_proxy
        .as_deref()
        .map(|u| ("upstream_proxy", u));
    let sends = config
        .send_proxy
        .as_deref()
        .map(|u| ("send_proxy", u))
        .or(reads);
    let reads_url = config.upstream.as_deref();
    let sends_url = config.send_upstream.as_deref().or(reads_url);
    for (proxy, url) in [(reads, reads_url), (sends, sends_url)] {
        if let (Some((setting, _)), Some(url)) = (proxy, url) {
            if url.starts_with("ws://") || url.starts_with("wss://") {
                let url = protocol::url::redact(url);
                return Err(UpstreamRouteError::WebSocket { setting, url });
            }
        }
    }
    let isolate = config.isolate_upstream_circuits;
    let reads_credentials = credentials(reads, Traffic::Reads, isolate);
    let sends_credentials = credentials(sends, Traffic::Sends, isolate);
    let same_server = reads.map(|r| r.1) == sends.map(|s| s.1);
    if reads.is_some() && same_server && reads_credentials == sends_credentials && isolate {
        return Err(UpstreamRouteError::SharedCredentials);
    }
    let proxy = |route: Option<(&'static str, &str)>, credentials: &Option<(String, String)>| {
        route
            .map(|(setting, url)| {
                let credentials = credentials.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
                ethpir_client::config::socks_proxy(setting, url, credentials)
            })
            .transpose()
    };
    Ok(Routes {
        reads: proxy(reads, &reads_credentials)?,
        sends: proxy(sends, &sends_credentials)?,
    })
}

/// Says at start which way the upstream's traffic goes, and warns where
/// reads and sends reach one SOCKS server with nothing to tell them apart.
pub fn log_routes(config: &ProxyConfig) {
    let Some(reads) = config.upstream_proxy.as_deref() else {
        if let Some(sends) = config.send_proxy.as_deref() {
            tracing::info!(send_proxy = %protocol::url::redact(sends), "sends go through SOCKS5; reads reach the upstream directly");
        }
        return;
    };
    let sends = config.send_proxy.as_deref().unwrap_or(reads);
    tracing::info!(
        upstream_proxy = %protocol::url::redact(reads),
        send_proxy = %protocol::url::redact(sends),
        isolate = config.isolate_upstream_circuits,
        "the upstream is reached through SOCKS5: reads and sends on connections of their own"
    );
    if !config.isolate_upstream_circuits && reads == sends {
        tracing::warn!("isolate_upstream_circuits = false with one SOCKS server: it sees reads and sends come from one client (Tor: the same circuit)");
    }
}

/// The credentials `traffic` gives its proxy: None where the URL names its
/// own (they are used as written) or isolation is off; made up otherwise.
fn credentials(
    route: Option<(&str, &str)>,
    traffic: Traffic,
    isolate: bool,
) -> Option<(String, String)> {
    let (_, url) = route?;
    let named = reqwest::Url::parse(url).is_ok_and(|u| !u.username().is_empty());
    if named || !isolate {
        return None;
    }
    let mut rng = rand::rng();
    let user = format!("ethpir-{}-{:016x}", traffic.name(), rng.random::<u64>());
    let password = format!("{:032x}", rng.random::<u128>());
    Some((user, password))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(upstream_proxy: Option<&str>, send_proxy: Option<&str>) -> ProxyConfig {
        ProxyConfig {
            upstream: Some("https://node.example".into()),
            upstream_proxy: upstream_proxy.map(Into::into),
            send_proxy: send_proxy.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn reads_and_sends_get_credentials_of_their_own() {
        let reads = credentials(
            Some(("p", "socks5h://127.0.0.1:9050")),
            Traffic::Reads,
            true,
        );
        let sends = credentials(
            Some(("p", "socks5h://127.0.0.1:9050")),
            Traffic::Sends,
            true,
        );
        let (reads, sends) = (reads.unwrap(), sends.unwrap());
        assert_ne!(reads, sends);
        assert!(reads.0.starts_with("ethpir-reads-") && sends.0.starts_with("ethpir-sends-"));
        // Named credentials are used as written; isolation off sends none.
        assert_eq!(
            credentials(Some(("p", "socks5h://u:p@h:1")), Traffic::Reads, true),
            None
        );
        assert_eq!(
            credentials(Some(("p", "socks5h://h:1")), Traffic::Reads, false),
            None
        );
        let r = routes(&config(Some("socks5h://127.0.0.1:9050"), None)).unwrap();
        assert!(r.reads.is_some() && r.sends.is_some());
    }

    #[test]
    fn shared_circuits_and_websockets_behind_a_proxy_are_refused() {
        let same = Some("socks5h://u:p@127.0.0.1:9050");
        assert!(matches!(
            routes(&config(same, same)),
            Err(UpstreamRouteError::SharedCredentials)
        ));
        let mut ws = config(Some("socks5h://127.0.0.1:9050"), None);
        ws.upstream = Some("wss://node.example/SECRET".into());
        let e = routes(&ws).err().unwrap();
        assert!(matches!(e, UpstreamRouteError::WebSocket { .. }), "{e}");
        assert!(!e.to_string().contains("SECRET"), "{e}");
        let http_proxy = config(Some("http://127.0.0.1:8080"), None);
        assert!(routes(&http_proxy).is_err());
        // Without a proxy, nothing is refused and nothing goes through one.
        let direct = routes(&config(None, None)).unwrap();
        assert!(direct.reads.is_none() && direct.sends.is_none());
    }
}
