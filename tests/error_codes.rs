//! The TypeScript union of error codes (`SyncErrorCode` in the generated `.d.ts`, written in
//! `src/api/typescript.rs`) lists exactly the engine's `ErrorCode`s, in the same order; the
//! exported `ServerCode` enum (`src/api/codes.rs`) is exactly the protocol crate's named codes.
#![cfg(not(target_arch = "wasm32"))]

use celeriant_sync::engine::errors::ErrorCode;

#[test]
fn the_d_ts_union_is_the_error_code_enum() {
    let source = include_str!("../src/api/typescript.rs");
    let start = source
        .find("export type SyncErrorCode =")
        .expect("SyncErrorCode is declared");
    let union = &source[start..];
    let union = &union[..union.find(';').expect("the union ends")];
    let declared: Vec<&str> = union
        .split('|')
        .skip(1)
        .map(|member| member.trim().trim_matches('"'))
        .collect();
    let codes: Vec<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    assert_eq!(declared, codes);
}

#[test]
fn the_server_code_enum_is_the_protocol_crates_codes() {
    use celeriant_sync::protocol::codes;
    let source = include_str!("../src/api/codes.rs");
    let body = &source[source
        .find("pub enum ServerCode {")
        .expect("ServerCode is declared")..];
    let declared: Vec<(String, u32)> = body
        .lines()
        .skip(1)
        .take_while(|line| line.trim() != "}")
        .map(|line| {
            let (name, value) = line.trim().trim_end_matches(',').split_once(" = ").unwrap();
            (name.to_owned(), value.parse().unwrap())
        })
        .collect();
    let expected: Vec<(String, u32)> = (0..100_000)
        .filter(|&c| {
            !(codes::celeriant::IDENTITY_FIRST..=codes::celeriant::IDENTITY_LAST).contains(&c)
        })
        .map(|c| (codes::name(c).to_owned(), c))
        .filter(|(name, _)| name != "UNKNOWN_CODE")
        .collect();
    assert_eq!(declared, expected);
    for code in codes::gateway::ALL {
        assert!(declared.iter().any(|(_, c)| *c == code), "{code}");
    }
}
