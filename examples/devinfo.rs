//! `devinfo`: like `ibv_devinfo`, listing every RDMA device with the attributes this library
//! types.
//!
//! Usage: `cargo run --example devinfo [-- DEVICE]`

use typed_verbs::prelude::*;

/// Every RDMA device with the attributes this library types, as ibv_devinfo lists them.
#[derive(clap::Parser)]
struct Args {
    /// Only this device.
    device: Option<String>,
}

fn main() -> typed_verbs::Result<()> {
    let Args { device: only } = clap::Parser::parse();
    let devs = devices()?;
    if devs.is_empty() {
        println!("No RDMA devices found");
        return Ok(());
    }
    for d in devs.iter().filter(|d| only.as_deref().is_none_or(|n| n == d.name)) {
        let ctx = Context::open(&d.name)?;
        let attr = ctx.query_device()?;
        println!("hca_id: {}", d.name);
        println!("\tnode_guid:\t\t{:016x}", d.guid);
        println!("\tfw_ver:\t\t\t{}", attr.fw_ver());
        println!("\tmax_qp:\t\t\t{}", attr.max_qp());
        println!("\tmax_qp_wr:\t\t{}", attr.max_qp_wr());
        println!("\tmax_sge:\t\t{}", attr.max_sge());
        println!("\tmax_cqe:\t\t{}", attr.max_cqe());
        println!("\tmax_mr:\t\t\t{}", attr.max_mr());
        println!("\tmax_mw:\t\t\t{}", attr.max_mw());
        println!("\tmax_qp_rd_atom:\t\t{}", attr.max_qp_rd_atom());
        println!("\tatomic_cap:\t\t{}", atomic_name(attr.atomic_cap()));
        let flags = attr.device_cap_flags();
        let mw = [
            (typed_verbs_sys::IBV_DEVICE_MEM_WINDOW, "type 1"),
            (typed_verbs_sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A, "type 2A"),
            (typed_verbs_sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B, "type 2B"),
        ];
        let mw: Vec<_> = mw.iter().filter(|(f, _)| flags & f != 0).map(|(_, n)| *n).collect();
        println!("\tmemory windows:\t\t{}", if mw.is_empty() { "none".to_string() } else { mw.join(", ") });
        println!("\tmax_inline_data:\t{} (largest a probe RC QP was granted)", probe_inline(&ctx));
        match ctx.query_odp() {
            Ok(odp) if odp.supported() => {
                println!("\tODP:\t\t\tyes{}", if odp.implicit_supported() { ", implicit" } else { "" });
                println!("\t\tRC:\t{:?}", odp.ops::<RC>());
                println!("\t\tUC:\t{:?}", odp.ops::<UC>());
                println!("\t\tUD:\t{:?}", odp.ops::<UD>());
                println!("\t\tXRC:\t{:?}", odp.ops::<XRC_SEND>());
            }
            Ok(_) => println!("\tODP:\t\t\tnone (no transport supports On-Demand Paging)"),
            Err(e) => println!("\tODP:\t\t\tunknown ({e})"),
        }
        for port in 1..=attr.phys_port_cnt() {
            let p = ctx.query_port(port)?;
            println!("\tport:\t{port}");
            println!("\t\tstate:\t\t{:?}", p.state());
            println!("\t\tactive_mtu:\t{}", p.active_mtu().map_or(0, |m| m.bytes()));
            println!("\t\tmax_mtu:\t{}", p.max_mtu().map_or(0, |m| m.bytes()));
            println!("\t\tlink_layer:\t{:?}", p.link_layer());
            println!("\t\tlid:\t\t{}", p.lid());
            // The indices an address vector can name (`sgid_index` is 8 bits).
            for i in (0..=u8::MAX).take_while(|&i| u32::from(i) < p.gid_tbl_len()) {
                match ctx.query_gid(port, i) {
                    Ok(g) if !g.is_zero() => println!("\t\tGID[{i:3}]:\t{g}"),
                    _ => {}
                }
            }
        }
    }
    Ok(())
}

/// The largest `max_inline_data` (of a few candidates) an RC QP on this device accepts.
fn probe_inline(ctx: &Context) -> u32 {
    let (Ok(pd), Ok(cq)) = (ctx.alloc_pd(), ctx.create_cq(4)) else { return 0 };
    for want in [1024, 512, 256, 128, 64, 0] {
        let caps = QpCaps { max_send_wr: 1, max_recv_wr: 1, max_inline_data: want, ..QpCaps::default() };
        if let Ok(qp) = pd.create_qp::<RC>(&QpConfig::new(&cq).caps(caps)) {
            return qp.caps().max_inline_data;
        }
    }
    0
}

fn atomic_name(cap: u32) -> &'static str {
    match cap {
        0 => "ATOMIC_NONE",
        1 => "ATOMIC_HCA",
        2 => "ATOMIC_GLOB",
        _ => "unknown",
    }
}
