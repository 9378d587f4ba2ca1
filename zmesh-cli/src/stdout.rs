//! Stdout that its reader may close (`zmesh bench | head -1`): [`out!`] / [`outln!`] write and
//! flush, and return the `io::Error` instead of panicking as `print!` / `println!` do; a
//! reader that went away is an error of kind `BrokenPipe` ([`is_closed`]), which ends the
//! command quietly. Shared by the `zmesh` binary (`output.rs` builds its own `out!` on
//! [`write_out`]) and the tool crates it runs, `zmesh-bench`, `zmesh-conform` and
//! `zmesh-sim`, which include this file (`#[path]`) and end their command with status 0 when
//! [`is_closed`] says so.
// Not every crate that includes this file uses both macros (the binary uses neither: its
// own, in `output.rs`, are built on `write_out`).
#![allow(unused_macros, unused_imports)]

use std::fmt;
use std::io::{self, Write};

/// Writes `args` to stdout and flushes it, so that a closed stdout is found at this write.
pub(crate) fn write_out(args: fmt::Arguments<'_>) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_fmt(args).and_then(|()| out.flush())
}

/// Whether `e`, from [`write_out`], says that stdout's reader closed it.
pub(crate) fn is_closed(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::BrokenPipe
}

/// `print!` that returns `io::Result<()>` (see [`write_out`]).
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::stdout::write_out(format_args!($($arg)*))
    };
}

/// `println!` that returns `io::Result<()>` (see [`write_out`]).
macro_rules! outln {
    () => {
        $crate::stdout::write_out(format_args!("\n"))
    };
    ($($arg:tt)*) => {
        $crate::stdout::write_out(format_args!("{}\n", format_args!($($arg)*)))
    };
}

pub(crate) use {out, outln};
