//! The live waiting line on a terminal.

use std::io::Write;

/// The live waiting line on a terminal; erased on drop.
#[derive(Default)]
pub struct LiveLine {
    shown: std::cell::Cell<bool>,
}

impl LiveLine {
    pub fn show(&self, text: &str) {
        // Never wider than the terminal: a wrapped line cannot be erased.
        let width = terminal_width().unwrap_or(80).saturating_sub(1);
        let text: String = text.chars().take(width).collect();
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{text}");
        let _ = err.flush();
        self.shown.set(true);
    }
}

impl Drop for LiveLine {
    fn drop(&mut self) {
        if self.shown.get() {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

fn terminal_width() -> Option<usize> {
    let size = rustix::termios::tcgetwinsize(std::io::stderr()).ok()?;
    (size.ws_col > 0).then_some(usize::from(size.ws_col))
}
