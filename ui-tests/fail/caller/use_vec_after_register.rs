// A registered buffer moves into its region: the original `Vec` is gone, so it can be neither
// read nor written (nor freed) while the device may use the memory.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd) -> typed_verbs::Result<()> {
    let mut buf = vec![0u8; 4096];
    let mr = pd.register(buf, access::REMOTE_RW)?;
    buf[0] = 1;
    drop(mr);
    Ok(())
}

fn main() {}
