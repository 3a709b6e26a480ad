//! `--clap-generate KIND` (hidden, first argument only): the man page
//! (`man`) or a shell's completions (`bash`, `zsh`, `fish`, `elvish`,
//! `powershell`) of this program, from its clap definition, on stdout.
//! `cargo xtask man` runs it for rivetrun and rivet-bench. (rivet-bench
//! includes this file too.)

/// If the arguments ask for generation, do it and return the exit status.
pub fn from_args(command: impl FnOnce() -> clap::Command) -> Option<std::process::ExitCode> {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() != Some("--clap-generate") {
        return None;
    }
    let kind = args.next().unwrap_or_default();
    Some(match generate(&kind, command(), &mut std::io::stdout()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("--clap-generate: {e}");
            std::process::ExitCode::from(2)
        }
    })
}

pub fn generate(
    kind: &str,
    mut command: clap::Command,
    out: &mut dyn std::io::Write,
) -> Result<(), String> {
    let name = command.get_name().to_string();
    match kind {
        "man" => clap_mangen::Man::new(command)
            .render(out)
            .map_err(|e| e.to_string()),
        shell => {
            let shell: clap_complete::Shell = shell.parse().map_err(|_| {
                format!("{shell:?}: use man, bash, zsh, fish, elvish or powershell")
            })?;
            clap_complete::generate(shell, &mut command, name, out);
            Ok(())
        }
    }
}
