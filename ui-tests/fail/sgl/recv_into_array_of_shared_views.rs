// A receive writes every entry of its scatter list: an array of shared views does not compile.
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::wr;

fn f(a: &Mr<access::LocalRw>) {
    let _ = wr::Recv::new([a.slice(..8).unwrap(), a.slice(8..16).unwrap()]);
}

fn main() {}
