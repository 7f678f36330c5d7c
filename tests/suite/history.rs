//! The history reads as a list of changes: every commit since the rule was
//! made (CONTRIBUTING.md, "Commits") has a subject of at most 72
//! characters. Earlier subjects ran to 435.

use std::process::Command;

/// The last commit before the rule; every later one keeps it.
const BEFORE_THE_RULE: &str = "a1b587b";

fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).into_owned())
}

#[test]
fn commit_subjects_are_at_most_72_characters() {
    // Built from a source archive there is no history to read.
    if git(&["rev-parse", "--git-dir"]).is_none() {
        eprintln!("not a git checkout: no history to check");
        return;
    }
    // A shallow clone may not reach the rule's commit: then what it has.
    let range = match git(&["cat-file", "-e", &format!("{BEFORE_THE_RULE}^{{commit}}")]) {
        Some(_) => format!("{BEFORE_THE_RULE}..HEAD"),
        None => "HEAD".to_string(),
    };
    let subjects = git(&["log", "--format=%h %s", &range]).expect("git log runs");
    let long: Vec<&str> = subjects
        .lines()
        .filter(|line| line.split_once(' ').map_or(0, |(_, s)| s.chars().count()) > 72)
        .collect();
    assert!(long.is_empty(), "subjects over 72 characters: {long:#?}");
}
