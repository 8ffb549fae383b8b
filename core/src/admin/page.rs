//! The page: static HTML, CSS and JS embedded in the crate, no build step and
//! nothing loaded from elsewhere (CSP `default-src 'self'` would refuse it).
//!
//! The script renders every value with `textContent` and builds elements
//! with `createElement`, never `innerHTML`, so args holding `<script>` or
//! `"><img onerror=...>` show as the text they are (Flower's XSS through task
//! args is the case this rules out).

/// The page's script, served from `/app.js` (CSP allows no inline script).
pub const APP_JS: &str = include_str!("page/app.js");

/// The page's style, served from `/style.css`.
pub const STYLE_CSS: &str = include_str!("page/style.css");

const INDEX: &str = include_str!("page/index.html");

const LOGIN: &str = include_str!("page/login.html");

/// The login page: a form that posts the token to `<mount>/login`. `mount`
/// is checked to hold URL path characters only, and `message` is one of the
/// admin's own fixed sentences, so neither needs escaping.
pub(crate) fn login(mount: &str, message: &str) -> Vec<u8> {
    LOGIN
        .replace("__HEADWAY_MOUNT__", mount)
        .replace("__HEADWAY_MESSAGE__", message)
        .into_bytes()
}

/// The page with this admin's CSRF value and read-only flag in its meta tags.
/// Both are generated here (base64url, `true`/`false`), so nothing needs
/// escaping.
pub(crate) fn index(csrf: &str, read_only: bool) -> Vec<u8> {
    INDEX
        .replace("__HEADWAY_CSRF__", csrf)
        .replace(
            "__HEADWAY_READ_ONLY__",
            if read_only { "true" } else { "false" },
        )
        .into_bytes()
}
