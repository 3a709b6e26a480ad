//! The command line's tests: mpiexec spellings, values refused, MPMD sections.

use super::normalize::unknown_option;
use super::*;

#[test]
fn unknown_single_dash_words_are_long_options() {
    assert_eq!(
        norm(&["rivetrun", "-hosts", "a,b", "-n", "2", "prog"])[1],
        "--hosts"
    );
    assert_eq!(norm(&["rivetrun", "-n4", "prog"])[1], "-n4");
    // Hydra's host options parse, with their values.
    let c = parse(&[
        "rivetrun",
        "-hosts",
        "a,b:2",
        "-ppn",
        "2",
        "-launcher",
        "rsh",
        "-launcher-exec",
        "/x",
        "-iface",
        "br0",
        "-n",
        "4",
        "prog",
        "-f",
    ])
    .unwrap();
    assert_eq!(c.hosts.as_deref(), Some("a,b:2"));
    assert_eq!(c.launcher, Some(crate::remote::start::Kind::Rsh));
    assert_eq!(c.launcher_exec.as_deref(), Some("/x"));
    assert_eq!(c.iface.as_deref(), Some("br0"));
    assert_eq!(c.command, ["prog", "-f"]);
    let c = parse(&["rivetrun", "-f", "hf", "-n", "2", "prog"]).unwrap();
    assert_eq!(c.hostfile, Some(PathBuf::from("hf")));
    let c = parse(&[
        "rivetrun",
        "-machinefile",
        "hf",
        "-bootstrap",
        "ssh",
        "prog",
    ])
    .unwrap();
    assert_eq!(c.hostfile, Some(PathBuf::from("hf")));
    assert!(parse(&["rivetrun", "-launcher", "pbs", "prog"]).is_err());
    // An unknown mpiexec word is an error, not help.
    assert!(parse(&["rivetrun", "-bogus", "-n", "2", "prog"]).is_err());
}

#[test]
fn unknown_options_are_named_as_typed_and_f_is_a_hostfile() {
    let typed = |args: &[&str]| {
        let original: Vec<OsString> = args.iter().map(OsString::from).collect();
        let e = Cli::command()
            .try_get_matches_from(normalize(original.iter().cloned()))
            .expect_err("must fail");
        assert_eq!(e.exit_code(), 2, "{e}");
        unknown_option(&e, &original)
    };
    assert_eq!(
        typed(&["rivetrun", "-bogus", "prog"]).as_deref(),
        Some("-bogus")
    );
    assert_eq!(
        typed(&["rivetrun", "--bogus", "prog"]).as_deref(),
        Some("--bogus")
    );
    assert_eq!(
        typed(&["rivetrun", "-hx=1", "prog"]).as_deref(),
        Some("-hx")
    );
    // Not an unknown option: a missing value.
    assert_eq!(typed(&["rivetrun", "-n"]), None);
    let cli = parse(&["rivetrun", "-f", "hosts", "prog"]).unwrap();
    assert_eq!(cli.hostfile, Some(PathBuf::from("hosts")));
    let cli = parse(&["rivetrun", "-prepend-rank", "prog"]).unwrap();
    assert!(cli.label);
}

#[test]
fn hydra_spellings_parse() {
    let cli = parse(&[
        "rivetrun",
        "-genvall",
        "-prepend-rank",
        "-pmi-port",
        "-disable-auto-cleanup",
        "-timeout",
        "5",
        "-outfile-pattern",
        "o.%r",
        "-errfile-pattern",
        "e.%r",
        "-n",
        "2",
        "prog",
        "-timeout",
    ])
    .unwrap();
    assert!(cli.genvall && cli.label && cli.pmi_port && cli.disable_auto_cleanup);
    assert_eq!(cli.timeout, Some(5.0));
    assert!(cli.outfile_pattern.is_some() && cli.errfile_pattern.is_some());
    assert_eq!(cli.command, ["prog", "-timeout"]);
    assert_eq!(norm(&["rivetrun", "-version"])[1], "--version");
    let cli = parse(&["rivetrun", "-configfile", "f.cfg"]).unwrap();
    assert_eq!(cli.configfile, Some(PathBuf::from("f.cfg")));
    assert!(cli.command.is_empty());
    // Hydra's launcher options, spelled with one dash.
    let cli = parse(&[
        "rivetrun",
        "-launcher",
        "fork",
        "-launcher-exec",
        "x",
        "-iface",
        "lo",
        "-hosts",
        "a,b",
        "prog",
    ])
    .unwrap();
    assert_eq!(cli.launcher_exec.as_deref(), Some("x"));
    assert_eq!(cli.iface.as_deref(), Some("lo"));
    assert_eq!(cli.hosts.as_deref(), Some("a,b"));
}

fn norm(args: &[&str]) -> Vec<String> {
    normalize(args.iter().map(OsString::from))
        .into_iter()
        .map(|s| s.into_string().unwrap())
        .collect()
}

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(normalize(args.iter().map(OsString::from)))
}

#[test]
fn mpiexec_spellings_are_rewritten_before_the_program_only() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["rivetrun", "-np", "4", "a.out"],
            &["rivetrun", "--np", "4", "--", "a.out"],
        ),
        (
            &[
                "rivetrun", "-genv", "A", "1", "-n", "2", "prog", "-np", "9", "-env",
            ],
            &[
                "rivetrun", "--genv", "A", "1", "-n", "2", "--", "prog", "-np", "9", "-env",
            ],
        ),
        (
            &["rivetrun", "-wdir", "/tmp", "-genvlist", "A,B", "x"],
            &["rivetrun", "--wdir", "/tmp", "--genvlist", "A,B", "--", "x"],
        ),
        // A value that looks like an option is a value, not an option.
        (
            &["rivetrun", "-env", "X", "-np", "p"],
            &["rivetrun", "--env", "X", "-np", "--", "p"],
        ),
        (&["rivetrun", "--", "-np"], &["rivetrun", "--", "-np"]),
    ];
    for (input, want) in cases {
        assert_eq!(norm(input), *want, "input {input:?}");
    }
}

#[test]
fn parses_a_full_command_line() {
    let cli = parse(&[
        "rivetrun",
        "-np",
        "3",
        "-l",
        "-genv",
        "A",
        "1",
        "-env",
        "B",
        "two words",
        "-wdir",
        "/tmp",
        "prog",
        "--flag",
        "-n",
        "5",
    ])
    .unwrap();
    assert_eq!(cli.nprocs, 3);
    assert!(cli.label);
    assert_eq!(cli.wdir, Some(PathBuf::from("/tmp")));
    assert_eq!(cli.global_assignments(), [("A".into(), "1".into())]);
    let sections = cli.sections().unwrap();
    assert_eq!(sections.len(), 1);
    assert_eq!(sections[0].env, [("B".into(), "two words".into())]);
    assert_eq!(sections[0].nprocs, 3);
    let cmd: Vec<_> = cli.command.iter().map(|s| s.to_str().unwrap()).collect();
    assert_eq!(cmd, ["prog", "--flag", "-n", "5"]);
}

#[test]
fn rejects_bad_usage() {
    assert!(parse(&["rivetrun", "-n", "2"]).is_err(), "no program");
    assert!(parse(&["rivetrun", "-n", "0", "x"]).is_err(), "zero ranks");
    assert!(
        parse(&["rivetrun", "-n", "two", "x"]).is_err(),
        "not a number"
    );
    assert!(
        parse(&["rivetrun", "-genv", "A", "-n"]).is_err(),
        "missing program"
    );
    assert!(
        parse(&["rivetrun", "--bogus", "x"]).is_err(),
        "unknown option"
    );
}

#[test]
fn impi_server_options() {
    let cli = parse(&[
        "rivetrun",
        "-impi-server",
        "2",
        "-port",
        "7000",
        "-auth",
        "3,1-0",
    ])
    .unwrap();
    assert_eq!(cli.impi_server, Some(2));
    assert_eq!(cli.port, Some(7000));
    assert_eq!(cli.auth, Some(AuthPreference(vec![3, 1, 0])));
    assert!(parse(&["rivetrun", "--impi-server", "0"]).is_err());
    assert!(parse(&["rivetrun", "--impi-server", "33"]).is_err());
    assert!(parse(&["rivetrun", "--impi-server", "2", "prog"]).is_err());
    assert!(parse(&["rivetrun", "--impi-server", "2", "--auth", "x"]).is_err());
    assert!(parse(&["rivetrun", "--auth", "1", "-n", "2", "prog"]).is_err());
    let cli = parse(&["rivetrun", "-impi-client", "1", "h:5", "-n", "2", "prog"]).unwrap();
    assert_eq!(
        cli.impi_client,
        Some(vec!["1".to_string(), "h:5".to_string()])
    );
    assert_eq!(cli.command, ["prog"]);
    assert!(parse(&["rivetrun", "--impi-client", "1", "-n", "2", "prog"]).is_err());
}

#[test]
fn name_server_options() {
    let cli = parse(&["rivetrun", "--name-server", "--port", "7000"]).unwrap();
    assert!(cli.name_server);
    assert_eq!(cli.port, Some(7000));
    assert!(cli.command.is_empty());
    let cli = parse(&["rivetrun", "--name-server"]).unwrap();
    assert_eq!(cli.port, None);
    // Hydra's spelling, before the program only.
    let cli = parse(&[
        "rivetrun",
        "-nameserver",
        "node1:7000",
        "-n",
        "2",
        "prog",
        "-port",
    ])
    .unwrap();
    assert_eq!(cli.nameserver.as_deref(), Some("node1:7000"));
    assert_eq!(cli.command, ["prog", "-port"]);
    assert!(parse(&["rivetrun", "--nameserver", "node1", "prog"]).is_err());
    assert!(parse(&["rivetrun", "--name-server", "prog"]).is_err());
    assert!(parse(&["rivetrun", "--port", "7000", "prog"]).is_err());
    assert!(parse(&["rivetrun", "--name-server", "--nameserver", "h:1"]).is_err());
    assert!(parse(&["rivetrun", "--port", "7000"]).is_err());
    let cli = parse(&["rivetrun", "--kill-grace", "5", "prog"]).unwrap();
    assert_eq!(cli.kill_grace, 5.0);
    assert_eq!(cli.command, ["prog"]);
}

#[test]
fn kill_grace_is_a_finite_wait() {
    for ok in ["0", "0.5", "3600"] {
        let cli = parse(&["rivetrun", "--kill-grace", ok, "prog"]).unwrap();
        assert_eq!(cli.kill_grace, ok.parse::<f64>().unwrap());
    }
    for bad in [
        "nan", "NaN", "inf", "-inf", "-1", "3601", "1e300", "soon", "",
    ] {
        let arg = format!("--kill-grace={bad}");
        let err = parse(&["rivetrun", &arg, "prog"])
            .expect_err(bad)
            .to_string();
        assert!(err.contains("--kill-grace"), "{bad}: {err}");
    }
}

#[test]
fn timeout_is_a_bounded_number_of_seconds() {
    let cli = parse(&["rivetrun", "-timeout", "2.5", "-n", "2", "prog"]).unwrap();
    assert_eq!(cli.timeout, Some(2.5));
    assert_eq!(cli.command, ["prog"]);
    assert_eq!(
        time_limit(&cli).unwrap(),
        Some(std::time::Duration::from_millis(2500))
    );
    let cli = parse(&["rivetrun", "--timeout", "0", "prog"]).unwrap();
    assert_eq!(time_limit(&cli).unwrap(), None, "0: no limit");
    for bad in ["-1", "nan", "inf", "1e12", "later", ""] {
        let arg = format!("--timeout={bad}");
        let err = parse(&["rivetrun", &arg, "prog"])
            .expect_err(bad)
            .to_string();
        assert!(err.contains("--timeout"), "{bad}: {err}");
    }
}

#[test]
fn mpmd_sections_and_configfile() {
    let cli = parse(&[
        "rivetrun", "-genv", "G", "1", "-n", "2", "a", "x", ":", "-np", "3", "-env", "K", "V", "b",
        "-n", "7",
    ])
    .unwrap();
    let s = cli.sections().unwrap();
    assert_eq!(s.len(), 2);
    assert_eq!(
        (s[0].nprocs, s[0].command.clone()),
        (2, vec!["a".into(), "x".into()])
    );
    assert_eq!(s[1].nprocs, 3);
    assert_eq!(s[1].command, ["b", "-n", "7"]);
    assert_eq!(s[1].env, [("K".into(), "V".into())]);
    assert!(parse(&["rivetrun", "a", ":"]).unwrap().sections().is_err());
    let cli = parse(&["rivetrun", "-configfile", "/nonexistent/cfg"]).unwrap();
    assert!(cli.sections().unwrap_err().contains("/nonexistent/cfg"));
    let both = parse(&["rivetrun", "-configfile", "cfg", "prog"]).unwrap();
    assert!(both.sections().is_err());
}

#[test]
fn cluster_id_option() {
    let cli = parse(&["rivetrun", "--cluster-id", "clA", "-n", "2", "prog"]).unwrap();
    assert_eq!(cli.cluster_id.as_deref(), Some("clA"));
    assert_eq!(cli.command, ["prog"]);
    assert_eq!(parse(&["rivetrun", "prog"]).unwrap().cluster_id, None);
    for bad in ["a:b", "", "a b", "x,y"] {
        assert!(
            parse(&["rivetrun", "--cluster-id", bad, "prog"]).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn genvlist_splits_on_commas() {
    let cli = parse(&[
        "rivetrun",
        "-genvnone",
        "-genvlist",
        "A,B",
        "-genvlist",
        "C",
        "x",
    ])
    .unwrap();
    assert!(cli.genvnone);
    assert_eq!(cli.genvlist, ["A", "B", "C"]);
}
