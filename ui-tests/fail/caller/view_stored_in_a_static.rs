// A view of the closure form's region cannot be stored anywhere that outlives the call: not in a
// static (nor a thread-local, a leaked box or a channel made outside, which all need a lifetime
// chosen outside the closure).
use std::sync::Mutex;
use typed_verbs::access;
use typed_verbs::mr::LocalBuf;
use typed_verbs::pd::Pd;

static KEPT: Mutex<Option<LocalBuf<'static>>> = Mutex::new(None);

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    pd.with_registered(buf, access::LOCAL_RW, |mr| {
        *KEPT.lock().unwrap() = mr.slice(..).ok();
    })?;
    Ok(())
}

fn main() {}
