// The closure form's handle (or a view of it) cannot go to a thread that may outlive the
// closure: the region is deregistered, and the slice's borrow ends, when the closure returns.
use typed_verbs::access;
use typed_verbs::pd::Pd;

fn f(pd: &Pd, buf: &mut [u8]) -> typed_verbs::Result<()> {
    pd.with_registered(buf, access::LOCAL_RW, |mr| {
        let view = mr.slice(..).unwrap();
        std::thread::spawn(move || drop(view));
    })
}

fn main() {}
