//! The TypeScript union of error codes (`SyncErrorCode` in the generated `.d.ts`, written in
//! `src/api/typescript.rs`) lists exactly the engine's `ErrorCode`s, in the same order.
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
