//! The generated documentation: man pages and shell completions, made from
//! the clap definitions in [`crate::cli`] and the exit codes in
//! [`crate::exit`], and committed. The test below fails when a committed
//! file no longer matches; `scripts/gen-docs` rewrites them.

use std::path::PathBuf;

use clap::CommandFactory;
use clap_complete::Shell;
use clap_mangen::Man;
use clap_mangen::roff::{Roff, bold, roman};

use crate::cli::{Cli, ENVIRONMENT};
use crate::exit::TABLE;

/// The README's exit-code table.
pub fn markdown_table() -> String {
    let mut out = String::from("| situation | code |\n|---|---|\n");
    for (situation, code) in TABLE {
        out.push_str(&format!("| {situation} | {code} |\n"));
    }
    out
}

fn man_page(cmd: clap::Command) -> Vec<u8> {
    let man = Man::new(cmd)
        .date("")
        .source(format!("elect {}", env!("CARGO_PKG_VERSION")));
    let mut out = Vec::new();
    man.render_title(&mut out).unwrap();
    man.render_name_section(&mut out).unwrap();
    man.render_synopsis_section(&mut out).unwrap();
    man.render_description_section(&mut out).unwrap();
    man.render_options_section(&mut out).unwrap();
    man.render_subcommands_section(&mut out).unwrap();
    let mut roff = Roff::new();
    roff.control("SH", ["EXIT STATUS"]);
    for (situation, code) in TABLE {
        roff.control("TP", []);
        roff.text([bold(code.replace('`', ""))]);
        roff.text([roman(situation.replace('`', ""))]);
    }
    roff.control("SH", ["ENVIRONMENT"]);
    for (name, meaning) in ENVIRONMENT {
        roff.control("TP", []);
        roff.text([bold(*name)]);
        roff.text([roman(*meaning)]);
    }
    roff.to_writer(&mut out).unwrap();
    out
}

/// Every generated file, by path relative to the repository.
fn generated() -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let cli = Cli::command();
    files.push(("man/elect.1".into(), man_page(cli.clone())));
    for sub in cli.get_subcommands() {
        let name: &'static str = format!("elect-{}", sub.get_name()).leak();
        files.push((
            format!("man/{name}.1").into(),
            man_page(sub.clone().name(name)),
        ));
    }
    for (shell, file) in [
        (Shell::Bash, "elect.bash"),
        (Shell::Zsh, "_elect"),
        (Shell::Fish, "elect.fish"),
    ] {
        let mut out = Vec::new();
        clap_complete::generate(shell, &mut Cli::command(), "elect", &mut out);
        files.push((format!("completions/{file}").into(), out));
    }
    files
}

#[test]
fn generated_files_match_the_definitions() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let bless = std::env::var_os("ELECT_BLESS").is_some();
    let mut stale = Vec::new();
    for (path, content) in generated() {
        let full = root.join(&path);
        if bless {
            std::fs::create_dir_all(full.parent().unwrap()).unwrap();
            std::fs::write(&full, &content).unwrap();
        } else if std::fs::read(&full).ok().as_deref() != Some(content.as_slice()) {
            stale.push(path.display().to_string());
        }
    }
    assert!(
        stale.is_empty(),
        "out of date: {stale:?}; run scripts/gen-docs"
    );
}

#[test]
fn the_readme_has_the_exit_code_table() {
    let readme =
        std::fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    assert!(
        readme.contains(&markdown_table()),
        "README.md must contain:\n{}",
        markdown_table()
    );
}
