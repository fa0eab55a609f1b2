// The prelude glob-imports next to std: `Send` and `Sync` stay the auto traits, `std::io`'s
// `Read` and `Write` and `std::fmt::Write` import without a clash, `Result<(), String>` is std's
// result with another error type, and the work requests are reached as `wr::Send`, `wr::Write`.
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::time::Duration;

use typed_verbs::prelude::*;

fn needs_send_sync<T: Send + Sync>(_: &T) {}

fn std_error() -> Result<(), Box<dyn std::error::Error>> {
    let mut text = String::new();
    write!(text, "{}", 1)?;
    let mut sink: Vec<u8> = Vec::new();
    sink.write_all(text.as_bytes())?;
    let mut back = String::new();
    std::io::Cursor::new(sink).read_to_string(&mut back)?;
    Ok(())
}

fn string_error(ok: bool) -> Result<(), String> {
    if ok {
        Ok(())
    } else {
        Err("refused".to_owned())
    }
}

fn the_library_error() -> Result<u32> {
    Ok(1)
}

fn post(qp: &Qp<RC, RTS>, src: &Mr<access::LocalRead>, dst: RemoteSlice<access::RemoteRw>) -> Result<()> {
    needs_send_sync(qp);
    needs_send_sync(src);
    scope(|s| -> Result<()> {
        let t = s.post_send(qp, wr::Write::new(src.slice(..)?, dst))?;
        let (completion, _) = s.wait(t, Duration::from_secs(1))?;
        completion.ok()?;
        let t = s.post_send(qp, wr::Send::new(src.slice(..)?))?;
        let (completion, _) = s.wait(t, Duration::from_secs(1))?;
        completion.ok()?;
        Ok(())
    })?
}

fn main() {
    let _ = (std_error, string_error, the_library_error, post);
}
