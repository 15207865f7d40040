//! What the shells' completions add to clap's generated ones: lock names
//! from the store for `--lock` of `status`, `check`, `break` and `checkpoint` (asked of
//! `elect list --names-only` with a short `--connect-timeout`, quietly),
//! the store URL schemes for `--store`, and commands, not files, after
//! `--`. Signal names come from clap itself (`--signal`'s possible values).

use clap_complete::Shell;

/// How long a completion waits for the store before offering nothing.
const ASK_WITHIN: &str = "500ms";

/// The commands whose `--lock` names an existing lock.
const LOCK_COMMANDS: &[&str] = &["status", "check", "break", "checkpoint", "history"];

/// The store URL schemes offered for `--store`, from every kind of store.
fn schemes() -> String {
    let schemes: Vec<&str> = crate::store::kinds()
        .flat_map(|kind| kind.about.schemes.iter().copied())
        .collect();
    schemes.join(" ")
}

/// clap's script for `shell`, with elect's additions.
pub fn extend(shell: Shell, script: &str) -> String {
    match shell {
        Shell::Bash => bash(script),
        Shell::Zsh => zsh(script),
        Shell::Fish => fish(script),
        _ => script.to_string(),
    }
}

/// `from` replaced by `to`, exactly `count` times: a change in clap's output
/// fails loudly here rather than silently losing a completion.
fn replace(script: &str, from: &str, to: &str, count: usize) -> String {
    assert_eq!(
        script.matches(from).count(),
        count,
        "clap's completion script changed: {from:?}"
    );
    script.replace(from, to)
}

fn bash(script: &str) -> String {
    let schemes = schemes();
    // clap's function becomes _elect_clap; _elect handles elect's own cases
    // first and hands everything else to it.
    let script = replace(script, "_elect() {\n", "_elect_clap() {\n", 1);
    let own = format!(
        r#"# Lock names for --lock of {commands}: asked of the store named on the
# command line (or in ELECT_STORE), within {ASK_WITHIN}, quietly.
_elect_locks() {{
    local -a words store=()
    local i
    read -ra words <<< "${{COMP_LINE:0:COMP_POINT}}"
    for (( i = 1; i < ${{#words[@]}}; i++ )); do
        case "${{words[i]}}" in
            --store) store=(--store "${{words[i+1]}}") ;;
            --store=*) store=("${{words[i]}}") ;;
        esac
    done
    "${{COMP_WORDS[0]}}" list --names-only --connect-timeout {ASK_WITHIN} "${{store[@]}}" </dev/null 2>/dev/null
}}

_elect() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="" sub="" i
    (( COMP_CWORD > 0 )) && prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        case "${{COMP_WORDS[i]}}" in
            --)
                # After --: the command, then what it completes itself.
                if (( COMP_CWORD == i + 1 )); then
                    COMPREPLY=( $(compgen -c -- "$cur" | sort -u) )
                elif declare -F _command_offset >/dev/null; then
                    _command_offset $(( i + 1 ))
                else
                    COMPREPLY=( $(compgen -f -- "$cur") )
                fi
                return 0
                ;;
            -*) ;;
            *) [[ -z $sub && ${{COMP_WORDS[i-1]}} != --log-format ]] && sub="${{COMP_WORDS[i]}}" ;;
        esac
    done
    case "$prev" in
        --lock|-l)
            case "$sub" in
                {pattern})
                    # Lock names or nothing: never file names instead.
                    compopt +o default +o bashdefault 2>/dev/null
                    COMPREPLY=( $(compgen -W "$(_elect_locks)" -- "$cur") )
                    return 0
                    ;;
            esac
            ;;
        --store)
            compopt -o nospace 2>/dev/null
            COMPREPLY=( $(compgen -W "{schemes}" -- "$cur") )
            return 0
            ;;
    esac
    _elect_clap "$@"
}}

"#,
        commands = LOCK_COMMANDS.join(", "),
        pattern = LOCK_COMMANDS.join("|"),
    );
    let at = script.find("_elect_clap() {\n").unwrap();
    format!("{}{own}{}", &script[..at], &script[at..])
}

fn zsh(script: &str) -> String {
    let schemes = schemes();
    // Each of status, check and break has -l and --lock with this help.
    let script = replace(
        script,
        "[Name of the lock]:NAME:_default'",
        "[Name of the lock]:NAME:_elect_locks'",
        2 * LOCK_COMMANDS.len(),
    );
    // --store of each command: run, status, list, check, break, checkpoint.
    let script = replace(&script, "]:URL:_default'", "]:URL:_elect_stores'", 7);
    let own = format!(
        r#"(( $+functions[_elect_locks] )) ||
_elect_locks() {{
    local -a store locks
    [[ -n ${{opt_args[--store]}} ]] && store=(--store "${{opt_args[--store]}}")
    locks=(${{(f)"$(elect list --names-only --connect-timeout {ASK_WITHIN} $store </dev/null 2>/dev/null)"}})
    compadd -a locks
}}
(( $+functions[_elect_stores] )) ||
_elect_stores() {{
    compadd -S '' {schemes}
}}

"#
    );
    let anchor = "if [ \"$funcstack[1]\" = \"_elect\" ]; then";
    let at = script.find(anchor).expect("clap's zsh script changed");
    format!("{}{own}{}", &script[..at], &script[at..])
}

fn fish(script: &str) -> String {
    let schemes = schemes();
    // A lock is a name, never a file: clap's -r lets fish offer files.
    let mut out = String::new();
    for line in script.lines() {
        match line.contains(" -s l -l lock ") && line.ends_with(" -r") {
            true => out.push_str(&format!(
                "{} -x",
                line.strip_suffix(" -r").expect("ends so")
            )),
            false => out.push_str(line),
        }
        out.push('\n');
    }
    out.push_str(&format!(
        r#"
# elect's own: lock names from the store, store URL schemes, and after --
# the command and its own completions.
function __fish_elect_locks
    set -l tokens (commandline -opc)
    set -l store
    set -l i (contains -i -- --store $tokens)
    and set store --store $tokens[(math $i + 1)]
    $tokens[1] list --names-only --connect-timeout {ASK_WITHIN} $store </dev/null 2>/dev/null
end
function __fish_elect_after_dashes
    contains -- -- (commandline -opc)
end
function __fish_elect_command
    set -l tokens (commandline -opc)
    set -l i (contains -i -- -- $tokens)
    set -l rest $tokens[(math $i + 1)..-1]
    if test (count $rest) -eq 0
        __fish_complete_command
    else
        complete -C "$rest "(commandline -ct)
    end
end
"#
    ));
    for command in LOCK_COMMANDS {
        out.push_str(&format!(
            "complete -c elect -n \"__fish_elect_using_subcommand {command}; and not __fish_elect_after_dashes\" -s l -l lock -x -a \"(__fish_elect_locks)\"\n"
        ));
    }
    out.push_str(&format!(
        "complete -c elect -n \"not __fish_elect_after_dashes\" -l store -x -a \"{schemes}\"\n"
    ));
    out.push_str(
        "complete -c elect -n \"__fish_elect_using_subcommand run; and __fish_elect_after_dashes\" -x -a \"(__fish_elect_command)\"\n",
    );
    out
}
