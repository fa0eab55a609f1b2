// A peer may RDMA WRITE a REMOTE_WRITE region at any time: the closure form's region over borrowed memory is never a plain &mut [u8] then either.
use typed_verbs::access;
use typed_verbs::caller::ScopedMr;

fn f(mr: &mut ScopedMr<'_, access::RemoteRw>) {
    mr.as_mut_slice()[0] = 1;
}

fn main() {}
