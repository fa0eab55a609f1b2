// A gather list is one view, an array of views, or a tuple of two to four: a tuple of five views is no list (an array of one kind takes any number, checked against max_send_sge when posting).
use typed_verbs::access;
use typed_verbs::mr::Mr;
use typed_verbs::wr;

fn f(a: &Mr<access::LocalRw>) {
    let v = a.slice(..8).unwrap();
    let _ = wr::Send::new((v, v, v, v, v));
}

fn main() {}
