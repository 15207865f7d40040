//! The `elect` binary: all of it is the library's (`src/lib.rs`).

fn main() {
    elect::main()
}
