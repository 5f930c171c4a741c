//! The configuration's own tests: every flag has its environment twin, and `Config::check`'s refusals.

use super::*;
use clap::CommandFactory;

#[test]
fn every_flag_has_an_environment_variable_twin() {
    let command = Config::command();
    let mut checked = 0;
    for arg in command.get_arguments() {
        let id = arg.get_id().as_str();
        if matches!(id, "help" | "version") {
            continue;
        }
        let long = arg.get_long().expect("every option is a long flag");
        let expected = format!(
            "CELERIANT_GATEWAY_{}",
            long.to_uppercase().replace('-', "_")
        );
        let env = arg
            .get_env()
            .unwrap_or_else(|| panic!("--{long} has no environment variable"));
        // One variable is named differently from its flag: the API key's.
        let allowed = match long {
            "celeriant-api-key" => "CELERIANT_GATEWAY_API_KEY".to_owned(),
            _ => expected,
        };
        assert_eq!(env.to_str(), Some(allowed.as_str()), "--{long}");
        checked += 1;
    }
    assert!(checked >= 50, "{checked}");
}

fn parse(args: &[&str]) -> Config {
    Config::parse_from(std::iter::once("celeriant-gateway").chain(args.iter().copied()))
}

/// `docs/protocol.md` has a table row for every flag, naming its variable and, where the
/// flag has one, its default exactly as `--help` prints it.
#[test]
fn the_protocol_document_lists_every_flag_with_its_variable_and_default() {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/protocol.md"))
        .expect("docs/protocol.md");
    let command = Config::command();
    let mut checked = 0;
    for arg in command.get_arguments() {
        let Some(long) = arg.get_long() else { continue };
        if matches!(long, "help" | "version") {
            continue;
        }
        let flag = format!("| `--{long}");
        let row = doc
            .lines()
            .find(|l| {
                l.starts_with(&flag) && matches!(l[flag.len()..].chars().next(), Some(' ' | '`'))
            })
            .unwrap_or_else(|| panic!("docs/protocol.md has no table row for --{long}"));
        let env = arg.get_env().and_then(|e| e.to_str()).expect("a variable");
        assert!(
            row.contains(&format!("`{env}`")),
            "--{long}: {env} not in {row}"
        );
        let is_switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        if let [default] = arg.get_default_values()
            && !is_switch
        {
            let default = default.to_str().expect("a default");
            assert!(
                row.contains(&format!("`{default}`")),
                "--{long}: default {default} not in {row}"
            );
        }
        checked += 1;
    }
    assert!(checked >= 50, "{checked}");
}

#[test]
fn verify_takes_the_data_directory_after_it() {
    let c = parse(&["verify", "--data-dir", "/srv/store"]);
    assert_eq!(c.command, Some(Command::Verify));
    assert_eq!(c.data_dir, PathBuf::from("/srv/store"));
    assert_eq!(Config::defaults().command, None, "serving is the default");
}

#[test]
fn contradicting_limits_are_refused() {
    for (args, needle) in [
        (
            &["--idle-timeout-ms", "1000", "--request-timeout-ms", "1000"][..],
            "--idle-timeout-ms",
        ),
        (
            &["--write-buffer-bytes", "1000"][..],
            "--write-buffer-bytes",
        ),
        (&["--read-buffer-bytes", "1000"][..], "--read-buffer-bytes"),
    ] {
        let err = parse(args).check().unwrap_err();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    assert_eq!(Config::defaults().limits.max_body_bytes, 7_541_918);
}

#[test]
fn test_switches_and_open_cors_are_refused_beyond_loopback() {
    assert!(Config::defaults().check().is_ok());
    assert_eq!(
        Config::defaults().auth,
        AuthMode::Device,
        "auth is on by default"
    );
    for loopback in ["127.0.0.1:0", "127.0.0.2:8080", "[::1]:0"] {
        let c = parse(&["--listen", loopback, "--auth", "none", "--faults"]);
        assert!(c.check().is_ok(), "{loopback}");
    }
    for (args, needle) in [
        (&["--listen", "0.0.0.0:8080"][..], "--allow-origin"),
        (&["--listen", "192.168.1.5:8080"][..], "--allow-origin"),
        (
            &[
                "--listen",
                "0.0.0.0:8080",
                "--allow-origin",
                "https://a.example",
                "--auth",
                "none",
            ][..],
            "--auth none",
        ),
        (
            &[
                "--listen",
                "[::]:8080",
                "--allow-origin",
                "https://a.example",
                "--faults",
            ][..],
            "--faults",
        ),
        (&["--app-token-alg", "hs256"][..], "--app-token-key-file"),
        (&["--app-token-key-file", "k"][..], "--app-token-alg"),
        (&["--app-token-issuer", "i"][..], "--app-token-alg"),
        (
            &["--session-secret", "s", "--session-secret-file", "f"][..],
            "not both",
        ),
    ] {
        let err = parse(args).check().unwrap_err();
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let public = parse(&[
        "--listen",
        "0.0.0.0:8080",
        "--allow-origin",
        "https://a.example",
    ]);
    assert!(public.check().is_ok());
}
