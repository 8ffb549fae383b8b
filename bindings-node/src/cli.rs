//! The `headway` command line's parse (core's `task::cli`): argv in, the
//! command as JSON out; `cli.js` loads the app and starts it. And the lines
//! it prints (core's `task::banner`): a line's name and fields in, its text
//! out.

use napi::Status;
use napi_derive::napi;

/// Reads the words after `headway` (core's parser, as Python's CLI):
/// `{"kind": "help", "text"}` or `{"kind": "run", "command", ...}` as JSON;
/// an error's message names what was wrong, usage included.
#[napi(js_name = "_cliParse", catch_unwind)]
pub fn cli_parse(argv: Vec<String>) -> napi::Result<String> {
    headway_core::task::cli::parse_json("node", &argv)
        .map_err(|e| napi::Error::new(Status::InvalidArg, e))
}

/// The printed line `line` from its fields as a JSON object (core's text,
/// as Python's CLI prints it); an error's message names a bad name or field.
#[napi(js_name = "_banner", catch_unwind)]
pub fn banner(line: String, fields: String) -> napi::Result<String> {
    headway_core::task::banner::text_json(&line, &fields)
        .map_err(|e| napi::Error::new(Status::InvalidArg, e))
}
