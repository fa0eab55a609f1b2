// `Connection::qp_mut` lends the QP for a lane: the connection cannot be dropped (which moves
// the QP to ERR and destroys it after the identifier) or disconnected while the lane is open.
use typed_verbs::cm::Connection;
use typed_verbs::scope::scope;

fn f(mut conn: Connection) {
    let _ = scope(|s| {
        let lane = s.send_lane(conn.qp_mut()).unwrap();
        drop(conn);
        drop(lane);
    });
}

fn main() {}
