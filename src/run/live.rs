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
    let mut size = libc::winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ fills the winsize struct it is given; no safe
    // wrapper exists in std or nix.
    let ok = unsafe { libc::ioctl(libc::STDERR_FILENO, libc::TIOCGWINSZ, &mut size) } == 0;
    (ok && size.ws_col > 0).then_some(usize::from(size.ws_col))
}
