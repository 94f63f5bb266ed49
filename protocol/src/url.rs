//! URLs in logs and manifests: scheme and host (and port) only. The path
//! and query, where hosted nodes put API keys, and any user info are hidden.
//! The one redactor every crate uses.

/// `scheme://host[:port]`, with `/…` when something was hidden.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit('@').next().unwrap_or("");
    let hidden = rest.len() > authority.len() || authority.contains('@');
    match (scheme.is_empty(), hidden) {
        (true, _) => "<url>".to_string(),
        (false, true) => format!("{scheme}://{host}/…"),
        (false, false) => format!("{scheme}://{host}"),
    }
}

/// `text` with every URL in it redacted: for error messages of libraries
/// that quote the URL they failed on.
pub fn redact_urls_in(text: &str) -> String {
    text.split(' ')
        .map(|word| match word.find("://") {
            Some(_) => {
                let start = word.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(0);
                let end = word
                    .rfind(|c: char| !matches!(c, '"' | '\'' | ')' | ']' | ',' | '.' | ':' | ';'))
                    .map_or(word.len(), |i| i + 1);
                format!(
                    "{}{}{}",
                    &word[..start],
                    redact(&word[start..end]),
                    &word[end..]
                )
            }
            None => word.to_string(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_inside_messages_are_redacted() {
        assert_eq!(
            redact_urls_in("error sending request for url (http://h:1/KEY123): refused"),
            "error sending request for url (http://h:1/…): refused"
        );
        assert_eq!(redact_urls_in("no url here"), "no url here");
    }

    #[test]
    fn only_scheme_and_host_remain() {
        assert_eq!(
            redact("https://eth.example.com/v3/SECRETKEY"),
            "https://eth.example.com/…"
        );
        assert_eq!(redact("http://127.0.0.1:8545"), "http://127.0.0.1:8545");
        assert_eq!(
            redact("wss://user:pw@node.example:443/x?k=1"),
            "wss://node.example:443/…"
        );
        assert_eq!(redact("https://n.example?key=abc"), "https://n.example/…");
        assert_eq!(redact("not a url"), "<url>");
        assert_eq!(redact("https://n.example/"), "https://n.example/…");
    }
}
