//! The `lockkeeper` command lines in the repository's documentation, checked against the
//! parser: every one in a code block of the README and of `docs/` must parse, so no page can
//! show a flag, a subcommand or a value the command would refuse.
//!
//! A line counts as a command when, in a `sh` (or unlabelled) block, it invokes `lockkeeper`
//! as a program (at the start, after a path or a cron schedule, in a unit's `ExecStart=`); in a
//! `text` block only after a `$ ` prompt, since the rest is output. The words run from the
//! program to the first shell operator (`|`, `||`, `&&`, `;`, `&`, a redirection) or comment.
//! What they do is tested elsewhere (`tests/lock_command/`, `tests/elect_command/`, ...); here
//! each is only parsed.

/// A documented command line: where it is and its words, the program's name first.
#[derive(Debug)]
pub(crate) struct Documented {
    pub place: String,
    pub words: Vec<String>,
}

/// The command lines in one Markdown text, `name` naming it in each place.
pub(crate) fn commands(name: &str, text: &str) -> Vec<Documented> {
    let mut found = Vec::new();
    let mut block: Option<String> = None;
    for (number, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(info) = trimmed.strip_prefix("```") {
            block = match block {
                Some(_) => None,
                None => Some(info.trim().to_string()),
            };
            continue;
        }
        let Some(language) = &block else { continue };
        let line = match language.as_str() {
            "text" | "console" => match trimmed.strip_prefix("$ ") {
                Some(command) => command,
                None => continue,
            },
            "" | "sh" | "bash" | "shell" | "ini" => trimmed.strip_prefix("$ ").unwrap_or(trimmed),
            _ => continue,
        };
        let mut words = shell_words(line);
        if let Some(comment) = words.iter().position(|word| word.starts_with('#')) {
            words.truncate(comment);
        }
        for segment in words.split(|word| is_operator(word)) {
            if let Some(program) = program_at(segment) {
                found.push(Documented {
                    place: format!("{name}:{}", number + 1),
                    words: segment[program..].to_vec(),
                });
            }
        }
    }
    found
}

/// Where `lockkeeper` stands as the program of one simple command, if it does: first, or after
/// a cron schedule (and its user), `sudo`, `env` or variable assignments.
fn program_at(segment: &[String]) -> Option<usize> {
    let cron_field = |word: &String| {
        word.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '*' | '/' | ',' | '-'))
    };
    let mut at = 0;
    if segment.len() > 5 && segment[..5].iter().all(cron_field) {
        at = 5;
        if segment.get(at).is_some_and(|word| !is_lockkeeper(word)) {
            at += 1; // the user of an /etc/cron.d line
        }
    }
    while let Some(word) = segment.get(at)
        && !is_lockkeeper(word)
        && (matches!(word.as_str(), "sudo" | "env" | "exec" | "nohup") || word.contains('='))
    {
        at += 1;
    }
    segment
        .get(at)
        .is_some_and(|word| is_lockkeeper(word))
        .then_some(at)
}

/// The program itself: `lockkeeper`, `/usr/local/bin/lockkeeper`, `ExecStart=.../lockkeeper`;
/// not `lockkeeper-bench` or `lockkeeper-faults`.
fn is_lockkeeper(word: &str) -> bool {
    let program = match word.split_once('=') {
        // A systemd unit's `ExecStart=`, `ExecStartPost=`, ...; `User=lockkeeper` is no program.
        Some((key, value)) if key.starts_with("Exec") => value,
        Some(_) => return false,
        None => word,
    };
    program == "lockkeeper" || program.ends_with("/lockkeeper")
}

fn is_operator(word: &str) -> bool {
    matches!(word, "|" | "||" | "&&" | ";" | "&")
        || word.starts_with('>')
        || word.starts_with('<')
        || word.starts_with("2>")
}

/// Splits a line as a POSIX shell would into words: quotes and backslashes, no expansion
/// (`$VAR` stays as written, a value like any other).
fn shell_words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::Cli;

    /// Why `words` does not parse, if it does not (help and version requests parse).
    fn refusal(words: &[String]) -> Option<String> {
        match Cli::try_parse_from(words) {
            Ok(_) => None,
            Err(e) if !e.use_stderr() => None,
            Err(e) => Some(e.to_string()),
        }
    }

    #[test]
    fn command_lines_are_found_and_cut_where_the_shell_would() {
        let text = "intro `lockkeeper lock X` in prose\n\
            ```sh\n\
            # a comment\n\
            */5 * * * * app lockkeeper lock --try /locks/a -- ./a.sh \"$X\" || [ $? -eq 75 ]\n\
            target/release/lockkeeper serve --listen 127.0.0.1:2181 &\n\
            lockkeeper-bench --compare\n\
            ```\n\
            ```text\n\
            $ lockkeeper inspect /locks/a\n\
            lockkeeper lock: backend unreachable\n\
            ```\n\
            ```ini\n\
            ExecStart=/usr/local/bin/lockkeeper serve --data-dir '/var/lib/a b'\n\
            User=lockkeeper\n\
            ```\n\
            ```sh\n\
            sudo systemctl enable --now lockkeeper && sudo lockkeeper man --dir /tmp/m\n\
            ```\n";
        let found = commands("page.md", text);
        let words: Vec<Vec<&str>> = found
            .iter()
            .map(|c| c.words.iter().map(String::as_str).collect())
            .collect();
        assert_eq!(
            words,
            [
                vec![
                    "lockkeeper",
                    "lock",
                    "--try",
                    "/locks/a",
                    "--",
                    "./a.sh",
                    "$X"
                ],
                vec![
                    "target/release/lockkeeper",
                    "serve",
                    "--listen",
                    "127.0.0.1:2181"
                ],
                vec!["lockkeeper", "inspect", "/locks/a"],
                vec![
                    "ExecStart=/usr/local/bin/lockkeeper",
                    "serve",
                    "--data-dir",
                    "/var/lib/a b"
                ],
                vec!["lockkeeper", "man", "--dir", "/tmp/m"],
            ]
        );
        assert_eq!(found[2].place, "page.md:9");
        // A flag the command does not have is refused, naming it.
        let wrong = commands("x.md", "```sh\nlockkeeper lock --no-such-flag /a\n```\n");
        let refused = refusal(&wrong[0].words).expect("an unknown flag is refused");
        assert!(refused.contains("--no-such-flag"), "{refused}");
    }

    #[test]
    fn every_documented_command_line_parses() {
        let root = lockkeeper_testkit::docs::repository_root();
        let mut checked = 0;
        let mut refused = Vec::new();
        for page in lockkeeper_testkit::docs::markdown_pages() {
            let text = std::fs::read_to_string(&page).expect("read page");
            let name = page
                .strip_prefix(&root)
                .unwrap_or(&page)
                .display()
                .to_string();
            for command in commands(&name, &text) {
                checked += 1;
                if let Some(why) = refusal(&command.words) {
                    refused.push(format!("{}: {:?}: {why}", command.place, command.words));
                }
            }
        }
        assert!(checked >= 15, "found only {checked} command lines");
        assert!(
            refused.is_empty(),
            "documented commands that do not parse:\n{}",
            refused.join("\n")
        );
    }
}
