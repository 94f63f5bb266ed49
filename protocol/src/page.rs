//! What the proxy's page and the server's page share: the script helpers
//! both use, the way a page gets its first status, and the headers that
//! keep it self-contained. Each page is a template with `/*COMMON*/` where
//! the helpers go and `/*STATUS*/null` where its status JSON goes.

/// The helpers (DOM, byte sizes, the refresh loop).
const COMMON_JS: &str = include_str!("../assets/page-common.js");
const COMMON_MARK: &str = "/*COMMON*/";
const STATUS_MARK: &str = "/*STATUS*/null";

/// `Content-Security-Policy` of a page: nothing from elsewhere (no
/// script, style or image; no frame around it), fetches to itself only.
pub const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; frame-ancestors 'none'";

/// `template` with the helpers and `status` (JSON) in place; `<` in the
/// JSON is escaped, so that no string in it can close the script element
/// it sits in.
pub fn fill(template: &str, status: &str) -> String {
    let json = status.replace('<', "\\u003c");
    template
        .replacen(COMMON_MARK, COMMON_JS, 1)
        .replacen(STATUS_MARK, &json, 1)
}

/// Whether `template` has one place for the helpers and one for the
/// status (the pages' tests check theirs).
pub fn is_template(template: &str) -> bool {
    template.matches(COMMON_MARK).count() == 1 && template.matches(STATUS_MARK).count() == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filled_page_holds_its_status_and_no_string_closes_its_script() {
        let template = "<script>/*COMMON*/</script><script>/*STATUS*/null</script>";
        assert!(is_template(template));
        let status = serde_json::json!({"why": "</script><b>"}).to_string();
        let page = fill(template, &status);
        assert!(page.contains("function live("));
        assert_eq!(page.matches("</script>").count(), 2, "{page}");
        let inner = page
            .split("<script>")
            .nth(2)
            .unwrap()
            .trim_end_matches("</script>");
        let back: serde_json::Value = serde_json::from_str(inner).unwrap();
        assert_eq!(back["why"], "</script><b>");
    }
}
