//! The documentation's own checks: every link between the repository's Markdown files resolves
//! (the file exists, and a `#anchor` names a heading of that file, by GitHub's rule for heading
//! anchors), and every page with Rust in it is compiled as a doc test (listed in `lib.rs`'s
//! `documentation` module), so no example in the README or the guide can drift from the API.

use std::collections::BTreeSet;
use std::path::Path;

use lockkeeper_testkit::docs::{markdown_pages as pages, repository_root as root};

/// The lines of `text` outside fenced code blocks.
fn prose(text: &str) -> Vec<&str> {
    let mut in_code = false;
    text.lines()
        .filter(|line| {
            if line.trim_start().starts_with("```") {
                in_code = !in_code;
                return false;
            }
            !in_code
        })
        .collect()
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores
/// kept), spaces made hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, ' ' | '-' | '_'))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(page: &Path) -> BTreeSet<String> {
    let text = std::fs::read_to_string(page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
    prose(&text)
        .into_iter()
        .filter_map(|line| {
            let hashes = line.len() - line.trim_start_matches('#').len();
            (hashes > 0 && line[hashes..].starts_with(' ')).then(|| anchor(&line[hashes..]))
        })
        .collect()
}

/// The targets of the inline links `[text](target)` in one line, inline code left out.
fn link_targets(line: &str) -> Vec<String> {
    let mut outside_code = String::new();
    for (i, part) in line.split('`').enumerate() {
        if i % 2 == 0 {
            outside_code.push_str(part);
        }
    }
    let mut targets = Vec::new();
    let mut rest = outside_code.as_str();
    while let Some(at) = rest.find("](") {
        rest = &rest[at + 2..];
        if let Some(end) = rest.find(')') {
            targets.push(rest[..end].to_string());
            rest = &rest[end + 1..];
        }
    }
    targets
}

#[test]
fn anchors_follow_githubs_rule() {
    assert_eq!(
        anchor("Leader: `lockkeeper elect`"),
        "leader-lockkeeper-elect"
    );
    assert_eq!(
        anchor("Where a durable write's time goes"),
        "where-a-durable-writes-time-goes"
    );
    assert_eq!(
        anchor("Locks next to Curator, and next to redis-py"),
        "locks-next-to-curator-and-next-to-redis-py"
    );
    assert_eq!(
        link_targets("see [a](b.md#c) and `[x](y)` and [d](e/)"),
        ["b.md#c", "e/"]
    );
}

#[test]
fn every_link_between_the_markdown_files_resolves() {
    let pages = pages();
    assert!(pages.len() > 10, "found only {pages:?}");
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).expect("read page");
        for (number, line) in prose(&text).into_iter().enumerate() {
            for target in link_targets(line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, fragment) = match target.split_once('#') {
                    Some((file, fragment)) => (file, Some(fragment)),
                    None => (target.as_str(), None),
                };
                let resolved = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().expect("a page's directory").join(file)
                };
                let place = format!("{} (prose line {}): {target}", page.display(), number + 1);
                if !resolved.exists() {
                    broken.push(format!("{place}: no such file"));
                } else if let Some(fragment) = fragment
                    && !anchors(&resolved).contains(fragment)
                {
                    broken.push(format!("{place}: no heading with that anchor"));
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn every_page_with_rust_in_it_is_compiled_as_a_doc_test() {
    let lib = std::fs::read_to_string(root().join("crates/lockkeeper/src/lib.rs")).expect("lib.rs");
    let mut missing = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("read page");
        if !text
            .lines()
            .any(|line| line.trim_start().starts_with("```rust"))
        {
            continue;
        }
        let relative = page
            .strip_prefix(root())
            .expect("under the root")
            .display()
            .to_string();
        if !lib.contains(&format!("include_str!(\"../../../{relative}\")")) {
            missing.push(relative);
        }
    }
    assert!(
        missing.is_empty(),
        "pages with Rust examples not compiled as doc tests (add them to lib.rs's \
         `documentation` module): {missing:?}"
    );
}
