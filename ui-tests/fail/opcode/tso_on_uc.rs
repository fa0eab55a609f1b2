// ibv_post_send(3) opcode table: IBV_WR_TSO is not valid on UC (only UD, RAW_PACKET): the TSO capability, the only way to a TSO request, cannot even be asked for UC.
use typed_verbs::device::Context;
use typed_verbs::transport::UC;

fn f(ctx: &Context) -> typed_verbs::Result<()> {
    let _cap = ctx.tso::<UC>()?;
    Ok(())
}

fn main() {}
