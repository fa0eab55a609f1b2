// `Connection::qp` borrows the connection: a reference to the QP in RTS cannot outlive
// `disconnect`, which moves the QP to ERR and hands it back (as `Qp<RC, ERR>`).
use typed_verbs::cm::Connection;

fn f(conn: Connection) {
    let rts = conn.qp();
    let err = conn.disconnect();
    let _ = rts.qp_num();
    drop(err);
}

fn main() {}
