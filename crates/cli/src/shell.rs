//! For the operator's shell: completion scripts (`lockkeeper completions SHELL`) and manual pages
//! (`lockkeeper man`). Both are generated from the clap definition the parser itself uses, so a
//! flag cannot be completed or documented that the command would refuse, nor the reverse.
//!
//! The man pages are roff: `lockkeeper.1` for the command and one `lockkeeper-SUBCOMMAND.1` per
//! subcommand (the layout `git` and `cargo` use), so `man lockkeeper-lock` finds the lock's
//! flags. Without `--dir`, `man` prints `lockkeeper.1` alone on stdout.

use std::io::Write;
use std::path::PathBuf;

use clap::{Args, Command};
use clap_complete::Shell;

/// `lockkeeper completions SHELL`.
#[derive(Args, Debug)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete for: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    shell: Shell,
}

/// `lockkeeper man [--dir DIR]`.
#[derive(Args, Debug)]
pub(crate) struct ManArgs {
    /// Write lockkeeper.1 and a lockkeeper-SUBCOMMAND.1 page per subcommand into DIR (created
    /// if missing) instead of printing lockkeeper.1.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

/// Prints the completion script for `args.shell` to `out`.
pub(crate) fn completions(
    args: &CompletionsArgs,
    mut command: Command,
    out: &mut dyn Write,
) -> std::io::Result<()> {
    let name = command.get_name().to_string();
    clap_complete::generate(args.shell, &mut command, name, out);
    out.flush()
}

/// Prints `lockkeeper.1` to `out`, or writes every page into `args.dir`, naming each file written
/// on `out`.
pub(crate) fn man(args: &ManArgs, command: Command, out: &mut dyn Write) -> std::io::Result<()> {
    let Some(dir) = &args.dir else {
        return clap_mangen::Man::new(command).render(out);
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", dir.display())))?;
    let name = command.get_name().to_string();
    let version = command.get_version().unwrap_or_default().to_string();
    let mut pages = vec![(name.clone(), command.clone())];
    for sub in command.get_subcommands().filter(|sub| !sub.is_hide_set()) {
        // `lockkeeper-lock(1)`, its title naming the command as typed.
        let page_name = format!("{name}-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(page_name.clone())
            .bin_name(format!("{name} {}", sub.get_name()))
            .version(version.clone());
        pages.push((page_name, sub));
    }
    for (page_name, page) in pages {
        let path = dir.join(format!("{page_name}.1"));
        let mut bytes = Vec::new();
        clap_mangen::Man::new(page).render(&mut bytes)?;
        std::fs::write(&path, bytes)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        writeln!(out, "{}", path.display())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;
    use crate::Cli;

    fn text(write: impl FnOnce(&mut Vec<u8>) -> std::io::Result<()>) -> String {
        let mut bytes = Vec::new();
        write(&mut bytes).expect("generate");
        String::from_utf8(bytes).expect("UTF-8")
    }

    #[test]
    fn every_shell_completes_every_subcommand_and_its_flags() {
        for shell in [
            Shell::Bash,
            Shell::Zsh,
            Shell::Fish,
            Shell::Elvish,
            Shell::PowerShell,
        ] {
            let script = text(|out| completions(&CompletionsArgs { shell }, Cli::command(), out));
            // Flags without their dashes: fish names them `-l semaphore`.
            for word in [
                "lock",
                "elect",
                "inspect",
                "revoke",
                "serve",
                "semaphore",
                "backend",
            ] {
                assert!(script.contains(word), "{shell} completion lacks {word}");
            }
        }
    }

    #[test]
    fn the_man_pages_cover_the_command_and_each_subcommand() {
        let page = text(|out| man(&ManArgs { dir: None }, Cli::command(), out));
        assert!(page.starts_with(".ie"), "{}", &page[..page.len().min(200)]);
        assert!(page.contains(".TH lockkeeper 1"), "{page}");
        for sub in ["lock", "elect", "inspect", "revoke", "serve", "verify"] {
            assert!(
                page.contains(&format!("lockkeeper\\-{sub}")),
                "no {sub} in {page}"
            );
        }
        let dir = tempfile::tempdir().expect("temp dir");
        let listed = text(|out| {
            man(
                &ManArgs {
                    dir: Some(dir.path().to_path_buf()),
                },
                Cli::command(),
                out,
            )
        });
        let lock_page = std::fs::read_to_string(dir.path().join("lockkeeper-lock.1"))
            .unwrap_or_else(|e| panic!("lockkeeper-lock.1 ({listed}): {e}"));
        assert!(
            lock_page.contains(".TH lockkeeper-lock 1  \"lockkeeper-lock 0."),
            "{lock_page}"
        );
        assert!(lock_page.contains("\\-\\-semaphore"), "{lock_page}");
        assert!(lock_page.contains("lockkeeper lock"), "{lock_page}");
    }
}
