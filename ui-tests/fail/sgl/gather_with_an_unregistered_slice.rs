// A gather list names registered memory only: a plain byte slice among the entries does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::wr;

fn f(a: &Mr<access::LocalRw>, bytes: &[u8]) {
    let _ = wr::Send::new((a.slice(..8).unwrap(), bytes));
}

fn main() {}
