// ibv_reg_mr(3): a pinned registration holds the pages it saw at registration. Discarding them
// (madvise(MADV_DONTNEED)) would give the program new pages while the device kept the old ones.
use typed_verbs::access;
use typed_verbs::mr::Mr;

fn f(mr: &mut Mr<access::RemoteRw>) {
    let _ = mr.discard_pages(..);
}

fn main() {}
