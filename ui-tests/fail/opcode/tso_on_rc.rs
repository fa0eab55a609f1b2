// ibv_post_send(3) opcode table: IBV_WR_TSO is not valid on RC (only UD, RAW_PACKET): the TSO capability, the only way to a TSO request, cannot even be asked for RC.
use typed_verbs::device::Context;
use typed_verbs::transport::RC;

fn f(ctx: &Context) -> typed_verbs::Result<()> {
    let _cap = ctx.tso::<RC>()?;
    Ok(())
}

fn main() {}
